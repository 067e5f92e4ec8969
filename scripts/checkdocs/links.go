package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// link is a link target and the line it is on.
type link struct {
	target string
	line   int
}

var (
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLink    = regexp.MustCompile(`(?m)^\s*\[[^\]]+\]:\s*(\S+)`)
	inlineCode = regexp.MustCompile("`[^`\n]*`")
)

// links returns the relative link targets of a markdown text (inline
// links, images and reference definitions) outside code.
func links(md string) []link {
	prose := blankFences(md)
	prose = inlineCode.ReplaceAllStringFunc(prose, func(s string) string { return strings.Repeat(" ", len(s)) })
	var out []link
	for _, re := range []*regexp.Regexp{inlineLink, refLink} {
		for _, m := range re.FindAllStringSubmatchIndex(prose, -1) {
			target := prose[m[2]:m[3]]
			if isExternal(target) {
				continue
			}
			out = append(out, link{target: target, line: 1 + strings.Count(prose[:m[2]], "\n")})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].line < out[j].line })
	return out
}

func isExternal(target string) bool {
	for _, p := range []string{"http://", "https://", "mailto:", "ftp://"} {
		if strings.HasPrefix(target, p) {
			return true
		}
	}
	return false
}

// checkLink resolves a link of the markdown file from (repository-relative).
func (t *tree) checkLink(from, target string) string {
	path, anchor, _ := strings.Cut(target, "#")
	dest := from
	if path != "" {
		if strings.HasPrefix(path, "/") {
			return "absolute path: links must be relative to the page"
		}
		dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(from), path)))
		if strings.HasPrefix(dest, "../") || dest == ".." {
			return "points outside the repository"
		}
		if _, err := os.Stat(filepath.Join(t.root, dest)); err != nil {
			return "no such file or directory"
		}
	}
	if anchor == "" || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	slugs, err := t.headingSlugs(dest)
	if err != nil {
		return err.Error()
	}
	if !slugs[anchor] {
		return fmt.Sprintf("%s has no heading with the anchor #%s", dest, anchor)
	}
	return ""
}

func (t *tree) headingSlugs(file string) (map[string]bool, error) {
	if s, ok := t.slugs[file]; ok {
		return s, nil
	}
	b, err := os.ReadFile(filepath.Join(t.root, file))
	if err != nil {
		return nil, err
	}
	s := headingAnchors(string(b))
	t.slugs[file] = s
	return s, nil
}

var (
	heading     = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	linkText    = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	notSlugChar = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// headingAnchors are the anchors GitHub gives a page's headings: the text
// without markup, lower-cased, punctuation but "-" and "_" dropped, spaces
// as "-"; a repeated one gets "-1", "-2", ...
func headingAnchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(blankFences(md), "\n") {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func slug(text string) string {
	text = linkText.ReplaceAllString(text, "$1")
	text = notSlugChar.ReplaceAllString(strings.ToLower(text), "")
	return strings.ReplaceAll(text, " ", "-")
}
