package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// span is an inline code span and the line it starts on.
type span struct {
	text string
	line int
}

// codeSpans returns the inline code spans of a markdown text outside
// fenced blocks. A span may wrap across lines; its text is then joined by
// a space, as markdown renders it.
func codeSpans(md string) []span {
	var out []span
	prose := blankFences(md)
	for i := 0; i < len(prose); i++ {
		if prose[i] != '`' {
			continue
		}
		j := i
		for j < len(prose) && prose[j] == '`' {
			j++
		}
		ticks := prose[i:j]
		end := strings.Index(prose[j:], ticks)
		if end < 0 {
			i = j - 1
			continue
		}
		text := strings.TrimSpace(strings.ReplaceAll(prose[j:j+end], "\n", " "))
		out = append(out, span{text: text, line: 1 + strings.Count(prose[:i], "\n")})
		i = j + end + len(ticks) - 1
	}
	return out
}

// blankFences replaces the content of fenced code blocks by empty lines,
// keeping line numbers.
func blankFences(md string) string {
	lines := strings.Split(md, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

type spanKind int

const (
	spanProse spanKind = iota
	spanPath
	spanIdent
)

var (
	pathChars  = regexp.MustCompile(`^[A-Za-z0-9_.\-/]+$`)
	qualified  = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?(?:\(\))?$`)
	camelCase  = regexp.MustCompile(`^(?:[a-z]+[A-Z]|[A-Z][a-z0-9]+[A-Z])[A-Za-z0-9]*$`)
	extensions = []string{".go", ".md", ".sh", ".proto", ".json", ".yaml", ".yml", ".js", ".css", ".html", ".patch"}
	// bareFileExtensions are the extensions of files a page may name
	// without their directory; other bare names (fleetview-routes.json)
	// are files fleetview writes at run time.
	bareFileExtensions = []string{".go", ".md", ".sh", ".proto"}
)

// checkSpan classifies a code span and, for a path or an identifier, says
// what is wrong with it ("" when it exists).
func (t *tree) checkSpan(s string) (spanKind, string) {
	if strings.ContainsAny(s, " <>=*?:,\"'{}()[]") && !strings.HasSuffix(s, "()") || strings.Contains(s, "..") || s == "" {
		return spanProse, ""
	}
	if strings.Contains(s, "/") && pathChars.MatchString(s) && !strings.HasPrefix(s, "/") {
		first := strings.SplitN(s, "/", 2)[0]
		if t.rootEntries[first] || hasExt(s, extensions) {
			if _, err := os.Stat(filepath.Join(t.root, s)); err != nil {
				return spanPath, "no such file or directory in the repository"
			}
			return spanPath, ""
		}
		return spanProse, ""
	}
	if !strings.Contains(s, "/") && hasExt(s, extensions) {
		if !hasExt(s, bareFileExtensions) {
			return spanProse, ""
		}
		if !t.fileNames[s] {
			return spanPath, "no file of that name in the repository"
		}
		return spanPath, ""
	}
	if m := qualified.FindStringSubmatch(s); m != nil {
		return spanIdent, t.resolve(m[1], m[2], m[3])
	}
	if camelCase.MatchString(s) {
		if !t.words[s] {
			return spanIdent, "not found in any Go, proto, JavaScript, YAML or shell source"
		}
		return spanIdent, ""
	}
	return spanProse, ""
}

func hasExt(s string, exts []string) bool {
	for _, e := range exts {
		if strings.HasSuffix(s, e) {
			return true
		}
	}
	return false
}

// resolve checks a qualified identifier a.b[.c].
func (t *tree) resolve(a, b, c string) string {
	if dirs := t.pkgDirs[a]; len(dirs) > 0 {
		for _, d := range dirs {
			p := t.pkgs[d]
			if !p.decls[b] {
				continue
			}
			if c == "" || p.members[b][c] {
				return ""
			}
		}
		if c != "" {
			return fmt.Sprintf("package %s (%s) declares no %s with a method or field %s", a, strings.Join(dirs, ", "), b, c)
		}
		return fmt.Sprintf("package %s (%s) declares no %s", a, strings.Join(dirs, ", "), b)
	}
	if dirs := t.typeDirs[a]; len(dirs) > 0 {
		if c != "" {
			return fmt.Sprintf("%s is a type (in %s), not a package: a third element cannot be resolved", a, strings.Join(dirs, ", "))
		}
		for _, d := range dirs {
			if t.pkgs[d].members[a][b] {
				return ""
			}
		}
		return fmt.Sprintf("type %s (in %s) has no method or field %s", a, strings.Join(dirs, ", "), b)
	}
	if externalQualifiers[a] {
		return ""
	}
	return fmt.Sprintf("%s is neither a package nor a type of this repository (an outside one goes in externalQualifiers, scripts/checkdocs/main.go)", a)
}
