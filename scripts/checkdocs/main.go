// Command checkdocs fails when the documentation points at something that
// is not there: a file path or a Go identifier cited in backticks in the
// design pages (docs/architecture.md and docs/security.md by default), or
// a relative markdown link, or its #anchor, in any of the repository's
// markdown files, or a Go file a package's doc.go names, or a test,
// benchmark or fuzz target a Go comment or a page names (tests.go). scripts/check-docs.sh runs it from the repository root,
// and scripts/test.sh runs that script, so a rename that leaves a page
// behind fails CI instead of misleading the next reader.
//
// What counts as a citation, and how each is resolved:
//
//   - A path: a span with a "/" whose first element is an entry at the
//     repository root (`queryapi/authz/authz.go`, `store/`), or a span ending
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
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	tests := testRefs{declared: map[string]bool{}}
	for _, f := range tree.markdown {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, "", err
		}
		tests.addMarkdown(f, string(b))
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
		tests.addGo(f, string(b))
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
	problems = append(problems, tests.problems()...)
	summary = fmt.Sprintf("ok (%d paths and %d identifiers cited in %s, %d relative links in %d markdown files, %d documents cited in Go comments, %d Go files named in doc.go files, %d tests named in comments and pages)",
		nPaths, nIdents, strings.Join(cite, ", "), nLinks, len(tree.markdown), nCites, nDocFiles, len(tests.named))
	return problems, summary, nil
}
