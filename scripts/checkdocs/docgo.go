package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

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
