package main

import (
	"fmt"
	"go/scanner"
	"go/token"
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

// historyDir holds dated records of past runs: they name what was
// measured then, which later changes may rename or remove.
const historyDir = "docs/benchmarks/"

// testRefs gathers, from the files run reads anyway, the tests declared
// and the tests named, and checks the names once every file is in.
type testRefs struct {
	declared map[string]bool
	named    []testRef
}

type testRef struct {
	file string
	span
}

// addGo takes a Go file: its declarations if a _test.go file, and the
// tests its comments name (read with go/scanner, so a string holding
// "//" is not taken for one).
func (r *testRefs) addGo(file, src string) {
	if strings.HasSuffix(file, "_test.go") {
		for _, m := range testDecl.FindAllStringSubmatch(src, -1) {
			r.declared[m[1]] = true
		}
	}
	fset := token.NewFileSet()
	var s scanner.Scanner
	s.Init(fset.AddFile("", -1, len(src)), []byte(src), nil, scanner.ScanComments)
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return
		}
		if tok == token.COMMENT {
			r.name(file, lit, fset.Position(pos).Line)
		}
	}
}

// addMarkdown takes the tests a page names anywhere in it, but for the
// dated records under historyDir.
func (r *testRefs) addMarkdown(file, src string) {
	if !strings.HasPrefix(file, historyDir) {
		r.name(file, src, 1)
	}
}

// name records the tests text names, text starting at line of file.
func (r *testRefs) name(file, text string, line int) {
	for i, l := range strings.Split(text, "\n") {
		for _, m := range testName.FindAllString(l, -1) {
			if !placeholderTests[m] {
				r.named = append(r.named, testRef{file, span{text: m, line: line + i}})
			}
		}
	}
}

// problems are the named tests no _test.go file declares.
func (r *testRefs) problems() []string {
	var out []string
	for _, n := range r.named {
		if !r.declared[n.text] {
			out = append(out, fmt.Sprintf("%s:%d: names %s, which no _test.go file declares", n.file, n.line, n.text))
		}
	}
	return out
}
