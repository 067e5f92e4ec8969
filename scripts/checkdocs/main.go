// Command checkdocs fails when the documentation points at something that
// is not there: a file path or a Go identifier cited in backticks in the
// design pages (docs/architecture.md and docs/security.md by default), or
// a relative markdown link, or its #anchor, in any of the repository's
// markdown files, or a Go file a package's doc.go names. scripts/check-docs.sh runs it from the repository root,
// and scripts/test.sh runs that script, so a rename that leaves a page
// behind fails CI instead of misleading the next reader.
//
// What counts as a citation, and how each is resolved:
//
//   - A path: a span with a "/" whose first element is an entry at the
//     repository root (`queryapi/authz.go`, `backends/`), or a span ending
//     in a source or document extension (`scripts/test.sh`, `FLEETVIEW.md`,
//     found anywhere in the tree when it has no "/"). It must exist.
//   - A qualified identifier, `pkg.Name`, `pkg.Type.Member`, `Type.member`:
//     pkg is a package directory's name (`stream` is internal/stream),
//     Name a top-level declaration in it, Member a method or field of
//     Type; or Type is a type declared in the tree and member a method or
//     field of it. A qualifier that is neither must be in externalQualifiers
//     (a stdlib or library package, an OpenSearch or YAML field path).
//   - A camel-case identifier on its own (`decodeCursor`, `MsgID`,
//     `TestServeReplicas`): it must occur as a word in the tree's Go, proto,
//     JavaScript, YAML or shell sources.
//
// Spans with spaces, "<", "=", "*", "?", ":" or ".." are prose, flags,
// subjects or patterns, and are not checked.
//
// Go comments that cite a document (`docs/architecture.md, "The stream
// contract"`, `README.md`) must cite one in this repository, and the
// quoted section must be one of its headings.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// externalQualifiers are qualifiers of identifiers the design pages cite
// that this repository does not declare: library packages, and dotted
// field paths of OpenSearch answers, settings and registry YAML.
var externalQualifiers = map[string]bool{
	"tls": true, "net": true, "jetstream": true, "nats": true, "http": true, "grpc": true, "context": true,
	"_shards": true, "search": true, "spec": true, "backendStore": true,
}

// skipDirs are never read: history, vendored code, build and test outputs.
var skipDirs = map[string]bool{".git": true, "third_party": true, "node_modules": true, "artifacts": true, "bin": true}

func main() {
	cite := flag.String("cite", "docs/architecture.md,docs/security.md", "comma-separated markdown files whose backticked paths and identifiers must exist")
	flag.Parse()
	problems, summary, err := run(".", strings.Split(*cite, ","))
	if err != nil {
		fmt.Fprintln(os.Stderr, "check-docs:", err)
		os.Exit(2)
	}
	if report(os.Stdout, problems, summary) {
		os.Exit(1)
	}
}

// report prints the problems, or the summary when there are none, and
// says whether there were any.
func report(w io.Writer, problems []string, summary string) bool {
	if len(problems) == 0 {
		fmt.Fprintln(w, "docs:", summary)
		return false
	}
	for _, p := range problems {
		fmt.Fprintln(w, p)
	}
	fmt.Fprintf(w, "FAIL: %d documentation reference(s) point at nothing (above); fix the page or the code in the same change\n", len(problems))
	return true
}

// run checks the repository at root and returns every problem found.
func run(root string, cite []string) (problems []string, summary string, err error) {
	tree, err := loadTree(root)
	if err != nil {
		return nil, "", err
	}
	var nPaths, nIdents, nLinks int
	for _, f := range cite {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, "", fmt.Errorf("reading %s: %w", f, err)
		}
		for _, s := range codeSpans(string(b)) {
			kind, msg := tree.checkSpan(s.text)
			switch kind {
			case spanPath:
				nPaths++
			case spanIdent:
				nIdents++
			}
			if msg != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: `%s`: %s", f, s.line, s.text, msg))
			}
		}
	}
	for _, f := range tree.markdown {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, "", err
		}
		for _, l := range links(string(b)) {
			nLinks++
			if msg := tree.checkLink(f, l.target); msg != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: link (%s): %s", f, l.line, l.target, msg))
			}
		}
	}
	var nCites, nDocFiles int
	for _, f := range tree.goFiles {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, "", err
		}
		if filepath.Base(f) == "doc.go" {
			for _, r := range docGoFiles(string(b)) {
				nDocFiles++
				if msg := tree.checkDocGoFile(f, r.text); msg != "" {
					problems = append(problems, fmt.Sprintf("%s:%d: `%s`: %s", f, r.line, r.text, msg))
				}
			}
		}
		for _, c := range commentCitations(string(b)) {
			nCites++
			if msg := tree.checkCitation(f, c); msg != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: comment cites %s: %s", f, c.line, c.doc, msg))
			}
		}
	}
	summary = fmt.Sprintf("ok (%d paths and %d identifiers cited in %s, %d relative links in %d markdown files, %d documents cited in Go comments, %d Go files named in doc.go files)",
		nPaths, nIdents, strings.Join(cite, ", "), nLinks, len(tree.markdown), nCites, nDocFiles)
	return problems, summary, nil
}

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

// citation is a document a Go comment names, with the section it quotes
// ("" for none).
type citation struct {
	doc, section string
	line         int
}

var (
	lineComment = regexp.MustCompile(`//\s?(.*)$`)
	docCitation = regexp.MustCompile(`\b((?:[a-z][a-z0-9_-]*/)*[A-Za-z][A-Za-z0-9_-]*\.md)\b(?:,? \(?(?:section )?"([^"]+)")?`)
)

// commentCitations finds the documents cited in a Go file's line comments.
// Consecutive comment lines are read as one text, so a quoted section may
// wrap.
func commentCitations(src string) []citation {
	var out []citation
	var text strings.Builder
	var starts []int // offset in text -> line, per joined line
	var lines []int
	flush := func() {
		t := text.String()
		for _, m := range docCitation.FindAllStringSubmatchIndex(t, -1) {
			c := citation{doc: t[m[2]:m[3]]}
			if m[4] >= 0 {
				c.section = t[m[4]:m[5]]
			}
			i := sort.SearchInts(starts, m[2]+1) - 1
			c.line = lines[max(i, 0)]
			out = append(out, c)
		}
		text.Reset()
		starts, lines = starts[:0], lines[:0]
	}
	for n, l := range strings.Split(src, "\n") {
		m := lineComment.FindStringSubmatch(l)
		if m == nil || !strings.HasPrefix(strings.TrimSpace(l), "//") {
			if text.Len() > 0 {
				flush()
			}
			continue
		}
		if text.Len() > 0 {
			text.WriteByte(' ')
		}
		starts, lines = append(starts, text.Len()), append(lines, n+1)
		text.WriteString(strings.TrimSpace(m[1]))
	}
	if text.Len() > 0 {
		flush()
	}
	return out
}

// checkCitation resolves a cited document: a path from the repository root,
// else a name in the citing file's directory, else a file of that name
// anywhere (FLEETVIEW.md); and its quoted section among its headings.
func (t *tree) checkCitation(from string, c citation) string {
	var found string
	for _, p := range []string{c.doc, filepath.ToSlash(filepath.Join(filepath.Dir(from), c.doc))} {
		if _, err := os.Stat(filepath.Join(t.root, p)); err == nil {
			found = p
			break
		}
	}
	if found == "" {
		if strings.Contains(c.doc, "/") || !t.fileNames[c.doc] {
			return "no such document in the repository"
		}
		return ""
	}
	if c.section == "" {
		return ""
	}
	slugs, err := t.headingSlugs(found)
	if err != nil {
		return err.Error()
	}
	if !slugs[slug(c.section)] {
		return fmt.Sprintf("%s has no heading %q", found, c.section)
	}
	return ""
}

// tree is what the checks resolve against.
type tree struct {
	root        string
	rootEntries map[string]bool
	fileNames   map[string]bool // base names of every file
	markdown    []string        // repository-relative markdown files
	goFiles     []string        // repository-relative Go files
	words       map[string]bool // identifier-like words of the sources
	pkgs        map[string]*goPkg
	pkgDirs     map[string][]string // package directory base name -> directories
	typeDirs    map[string][]string // type name -> directories declaring it
	slugs       map[string]map[string]bool
}

var word = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

func loadTree(root string) (*tree, error) {
	t := &tree{
		root: root, rootEntries: map[string]bool{}, fileNames: map[string]bool{}, words: map[string]bool{},
		pkgs: map[string]*goPkg{}, pkgDirs: map[string][]string{}, typeDirs: map[string][]string{},
		slugs: map[string]map[string]bool{},
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return nil, fmt.Errorf("%s: %w", root, errNoRoot)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !skipDirs[e.Name()] || e.Name() == "third_party" {
			t.rootEntries[e.Name()] = true
		}
	}
	goFiles := map[string][]string{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if skipDirs[d.Name()] && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		t.fileNames[d.Name()] = true
		switch ext := filepath.Ext(p); ext {
		case ".md":
			t.markdown = append(t.markdown, rel)
		case ".go", ".proto", ".js", ".yaml", ".yml", ".sh":
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, w := range word.FindAllString(string(b), -1) {
				t.words[w] = true
			}
			if ext == ".go" {
				dir := filepath.ToSlash(filepath.Dir(rel))
				goFiles[dir] = append(goFiles[dir], p)
				t.goFiles = append(t.goFiles, rel)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// third_party holds files a page may name by their base name
	// (FLEETVIEW.md), though its code is not indexed.
	_ = filepath.WalkDir(filepath.Join(root, "third_party"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.fileNames[d.Name()] = true
		}
		return nil
	})
	for dir, files := range goFiles {
		p, err := parsePkg(files)
		if err != nil {
			return nil, err
		}
		t.pkgs[dir] = p
		base := filepath.Base(dir)
		t.pkgDirs[base] = append(t.pkgDirs[base], dir)
		for name := range p.types {
			t.typeDirs[name] = append(t.typeDirs[name], dir)
		}
	}
	for _, m := range []map[string][]string{t.pkgDirs, t.typeDirs} {
		for k := range m {
			sort.Strings(m[k])
		}
	}
	sort.Strings(t.markdown)
	return t, nil
}

var errNoRoot = errors.New("not the repository root (no go.mod there)")

// docGoFile is a Go file a package's doc.go names in its comment
// (`liststream.go`, `cmd/fleetview/app/metrics.go`): a package comment
// that explains the package file by file must follow its files' renames.
var docGoFile = regexp.MustCompile(`[A-Za-z0-9_][A-Za-z0-9_./-]*\.go\b`)

// libraryFileNames are names ending in .go that are projects, not files.
var libraryFileNames = map[string]bool{"nats.go": true}

// docGoFiles returns the Go file names in the comment lines of src.
func docGoFiles(src string) []span {
	var out []span
	for i, l := range strings.Split(src, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "//") || strings.Contains(l, "://") {
			continue
		}
		for _, m := range docGoFile.FindAllString(l, -1) {
			if !libraryFileNames[m] {
				out = append(out, span{text: m, line: i + 1})
			}
		}
	}
	return out
}

// checkDocGoFile resolves a Go file named in doc.go at from: in the
// package's directory, or else from the repository root.
func (t *tree) checkDocGoFile(from, name string) string {
	for _, p := range []string{path.Join(path.Dir(from), name), name} {
		if _, err := os.Stat(filepath.Join(t.root, filepath.FromSlash(p))); err == nil {
			return ""
		}
	}
	return fmt.Sprintf("no such file in %s or from the repository root", path.Dir(from))
}
