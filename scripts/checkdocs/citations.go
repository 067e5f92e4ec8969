package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

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
