package main

import (
	"fmt"
	"go/scanner"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// testName is a test, benchmark or fuzz target as `go test -run`,
// `-bench` or `-fuzz` takes it. A comment or page naming one sends the
// reader to it as the proof of a claim, so it must be declared: a name
// that only survives in a comment (a test renamed, removed, or never
// written) proves nothing. A subtest's part after "/" is not checked.
var testName = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*`)

// testDecl is the declaration of one in a _test.go file.
var testDecl = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*)\(`)

// placeholderTests are names that stand for any test (the naming scheme
// integration/README.md explains).
var placeholderTests = map[string]bool{"TestName": true}

// historyDirs hold dated records of past runs: they name what was
// measured then, which later changes may rename or remove.
var historyDirs = []string{"docs/benchmarks/"}

// declaredTests are the tests, benchmarks and fuzz targets the tree's
// _test.go files declare.
func (t *tree) declaredTests() (map[string]bool, error) {
	out := map[string]bool{}
	for _, f := range t.goFiles {
		if !strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(t.root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		for _, m := range testDecl.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
	}
	return out, nil
}

// testCitations are the tests named in a Go file's comments (read with
// go/scanner, so a string holding "//" is not taken for one) or anywhere
// in a markdown page.
func testCitations(src string, goFile bool) []span {
	var out []span
	add := func(text string, line int) {
		for i, l := range strings.Split(text, "\n") {
			for _, m := range testName.FindAllString(l, -1) {
				if !placeholderTests[m] {
					out = append(out, span{text: m, line: line + i})
				}
			}
		}
	}
	if !goFile {
		add(src, 1)
		return out
	}
	fset := token.NewFileSet()
	var s scanner.Scanner
	s.Init(fset.AddFile("", -1, len(src)), []byte(src), nil, scanner.ScanComments)
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return out
		}
		if tok == token.COMMENT {
			add(lit, fset.Position(pos).Line)
		}
	}
}

// checkTests reports every test the tree's Go comments and pages (but
// the history in historyDirs) name that no _test.go file declares.
func (t *tree) checkTests() (problems []string, cited int, err error) {
	declared, err := t.declaredTests()
	if err != nil {
		return nil, 0, err
	}
	files := append(append([]string(nil), t.goFiles...), t.markdown...)
	for _, f := range files {
		if isHistory(f) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(t.root, filepath.FromSlash(f)))
		if err != nil {
			return nil, 0, err
		}
		for _, s := range testCitations(string(b), strings.HasSuffix(f, ".go")) {
			cited++
			if !declared[s.text] {
				problems = append(problems, fmt.Sprintf("%s:%d: names %s, which no _test.go file declares", f, s.line, s.text))
			}
		}
	}
	return problems, cited, nil
}

func isHistory(f string) bool {
	for _, d := range historyDirs {
		if strings.HasPrefix(f, d) {
			return true
		}
	}
	return false
}
