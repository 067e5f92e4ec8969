package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
)

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
