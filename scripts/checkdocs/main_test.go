package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixture is a small repository: a package with a type, a method, a field
// and a function; a page citing things; pages linking to each other.
var fixture = map[string]string{
	"go.mod": "module example.com/x\n",
	"internal/stream/stream.go": `package stream

type QuotaError struct{ Stream string }

func (QuotaError) Error() string { return "quota" }

func ObjectSubject() string { return "" }

const ConsumerPrefix = "c_"
`,
	"queryapi/authz.go": `package queryapi

type Guard struct{}

func (g *Guard) discoveryView() {}

type ListOptions[T any] struct{ Visible T }

func (o *ListOptions[T]) apply() {}

func metaMatches() bool { return true }
`,
	"third_party/badger/FLEETVIEW.md": "# patch\n",
	"docs/other.md":                   "# Other page\n\n## Exactly-once apply, dead letters\n\n## Web console (`/console/`)\n\n## Twice\n\n## Twice\n",
}

func writeFixture(t *testing.T, extra map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for _, files := range []map[string]string{fixture, extra} {
		for name, body := range files {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func TestRun(t *testing.T) {
	tests := []struct {
		name string
		page string // the body of docs/architecture.md
		want string // a substring of the one problem expected; "" for none
	}{
		{"existing file", "see `internal/stream/stream.go`", ""},
		{"existing directory with slash", "see `internal/stream/`", ""},
		{"missing file", "see `internal/stream/gone.go`", "no such file or directory in the repository"},
		{"missing directory under a root entry", "see `queryapi/kubeapi`", "no such file or directory"},
		{"file outside known roots with extension", "see `scripts/check.sh`", "no such file"},
		{"bare file name found anywhere", "why in its `FLEETVIEW.md`", ""},
		{"bare file name missing", "see `NOTES.md`", "no file of that name"},
		{"runtime file name is prose", "saved in `fleetview-routes.json`", ""},
		{"package function", "`stream.ObjectSubject`", ""},
		{"package type", "`stream.QuotaError`", ""},
		{"package const", "`stream.ConsumerPrefix`", ""},
		{"renamed package function", "`stream.QuotaErr`", "package stream (internal/stream) declares no QuotaErr"},
		{"type field through package", "`stream.QuotaError.Stream`", ""},
		{"type method through package", "`stream.QuotaError.Error`", ""},
		{"missing member through package", "`stream.QuotaError.Cluster`", "declares no QuotaError with a method or field Cluster"},
		{"method of a type", "`Guard.discoveryView`", ""},
		{"method of a generic type", "`ListOptions.apply`", ""},
		{"field of a generic type", "`ListOptions.Visible`", ""},
		{"missing method of a type", "`Guard.view`", "type Guard (in queryapi) has no method or field view"},
		{"unknown qualifier", "`Gaurd.discoveryView`", "Gaurd is neither a package nor a type"},
		{"external qualifier", "`tls.Config`", ""},
		{"call parentheses", "`stream.ObjectSubject()`", ""},
		{"camel case word that exists", "`metaMatches`", ""},
		{"camel case word that does not", "`metaMatch`", "not found in any"},
		{"wrapped span", "`stream.QuotaErr\nor`", ""}, // "stream.QuotaErr or" is prose
		{"subjects and flags are prose", "`fv.obj.<cluster>.>` `--nats-routes` `c/<cluster>` `s/...` `fleetview.io/cluster`", ""},
		{"fenced code is not read", "```\n`stream.Nothing`\n```", ""},
		{"annotation with a slash", "`kubectl.kubernetes.io/last-applied-configuration`", ""},
		{"relative link", "[other](other.md)", ""},
		{"relative link to a directory", "[code](../queryapi)", ""},
		{"broken link", "[gone](gone.md)", "link (gone.md): no such file or directory"},
		{"link from the page's directory, not the root", "[x](docs/other.md)", "no such file"},
		{"anchor", "[a](other.md#exactly-once-apply-dead-letters)", ""},
		{"anchor with code in the heading", "[a](other.md#web-console-console)", ""},
		{"repeated heading anchor", "[a](other.md#twice-1)", ""},
		{"missing anchor", "[a](other.md#exactly-once)", "has no heading with the anchor #exactly-once"},
		{"anchor in the same page", "# Top\n\n[a](#top)", ""},
		{"missing anchor in the same page", "# Top\n\n[a](#bottom)", "no heading with the anchor #bottom"},
		{"link outside the repository", "[a](../../x.md)", "points outside the repository"},
		{"absolute link", "[a](/docs/other.md)", "absolute path"},
		{"external links are not fetched", "[a](https://example.com/x) [b](mailto:a@b)", ""},
		{"link in inline code is not a link", "`[a](gone.md)`", ""},
		{"image", "![shot](gone.png)", "link (gone.png): no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := writeFixture(t, map[string]string{"docs/architecture.md": tc.page + "\n"})
			problems, _, err := run(root, []string{"docs/architecture.md"})
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if len(problems) != 0 {
					t.Fatalf("want no problem, got %q", problems)
				}
				return
			}
			if len(problems) != 1 || !strings.Contains(problems[0], tc.want) {
				t.Fatalf("want one problem containing %q, got %q", tc.want, problems)
			}
		})
	}
}

func TestCommentCitations(t *testing.T) {
	tests := []struct {
		name    string
		comment string // a Go file's comment lines
		want    string // a substring of the one problem expected; "" for none
	}{
		{"document from the root", "// See docs/other.md.", ""},
		{"document and section", `// (docs/other.md, "Exactly-once apply, dead letters").`, ""},
		{"section wrapped over two lines", "// (see docs/other.md, \"Web console\n// (`/console/`)\")", ""},
		{"section in parentheses", `// docs/other.md ("Twice")`, ""},
		{"missing document", "// as DESIGN.md §3.6 says", "comment cites DESIGN.md: no such document"},
		{"missing path", "// docs/gone.md", "comment cites docs/gone.md: no such document"},
		{"missing section", `// docs/other.md, "Security model"`, `has no heading "Security model"`},
		{"a name beside the file", "// README.md in this directory", ""},
		{"a name elsewhere in the tree", "// each change in its FLEETVIEW.md", ""},
		{"code is not a comment", `var x = "docs/gone.md" // trailing`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := writeFixture(t, map[string]string{
				"docs/architecture.md": "# A\n",
				"queryapi/README.md":   "# here\n",
				"queryapi/cite.go":     "package queryapi\n\n" + tc.comment + "\nfunc cited() {}\n",
			})
			wantOneProblem(t, root, "queryapi/cite.go:3", tc.want)
		})
	}
}

func TestDocGoFiles(t *testing.T) {
	tests := []struct {
		name, comment string
		want          string // a substring of the one problem expected; "" for none
	}{
		{"file of the package", "// The guard (authz.go) judges.", ""},
		{"file from the root", "// Wired in internal/stream/stream.go.", ""},
		{"renamed file", "// Lists are streamed (liststream.go).", "liststream.go`: no such file in queryapi"},
		{"missing path from the root", "// See cmd/fleetview/app/nats.go.", "no such file"},
		{"the library is not a file", "// As nats.go's jetstream package does.", ""},
		{"a URL is not a file", "// https://example.com/x.go", ""},
		{"code is not read", "// Doc.\npackage queryapi\n\nconst x = \"gone.go\"", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := writeFixture(t, map[string]string{"docs/architecture.md": "\n", "queryapi/doc.go": "\n" + tc.comment + pkgClause(tc.comment)})
			wantOneProblem(t, root, "queryapi/doc.go:2", tc.want)
		})
	}
}

func TestTestCitations(t *testing.T) {
	const declared = "package queryapi\n\nimport \"testing\"\n\nfunc TestGuard(t *testing.T) {}\n\nfunc BenchmarkGuard(b *testing.B) {}\n\nfunc FuzzGuard(f *testing.F) {}\n"
	tests := []struct {
		name, file, text string
		at, want         string // where the one problem expected is, and a substring of it; "" for none
	}{
		{"declared test in a comment", "queryapi/cite.go", "package queryapi\n\n// TestGuard shows it.\n", "", ""},
		{"declared benchmark and fuzz target", "queryapi/cite.go", "package queryapi\n\n// BenchmarkGuard and FuzzGuard.\n", "", ""},
		{"subtest of a declared test", "queryapi/cite.go", "package queryapi\n\n// TestGuard/refuses_b shows it.\n", "", ""},
		{"test never written", "queryapi/cite.go", "package queryapi\n\n// TestReplyInjection shows it.\n", "queryapi/cite.go:3", "names TestReplyInjection, which no _test.go file declares"},
		{"comment after code", "queryapi/cite.go", "package queryapi\n\nvar x = 1 // BenchmarkGone measures it\n", "queryapi/cite.go:3", "names BenchmarkGone"},
		{"code is not a citation", "queryapi/cite.go", "package queryapi\n\nvar x = \"TestGone\"\n", "", ""},
		{"command in a page", "docs/run.md", "# Run\n\n```sh\ngo test -run '^TestGone$' ./queryapi/\n```\n", "docs/run.md:4", "names TestGone"},
		{"a dated record may name what it measured then", "docs/benchmarks/old.md", "# Old\n\n`BenchmarkGone` took 1 ms.\n", "", ""},
		{"the naming scheme's placeholder", "docs/run.md", "# Run\n\nSubtests are `TestName/subtest`.\n", "", ""},
		{"words that are not test names", "docs/run.md", "# Run\n\nTesting, Benchmarks and Fuzzy matches.\n", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := writeFixture(t, map[string]string{"docs/architecture.md": "# A\n", "queryapi/guard_test.go": declared, tc.file: tc.text})
			wantOneProblem(t, root, tc.at, tc.want)
		})
	}
}

// pkgClause completes a doc.go fixture that has no package clause.
func pkgClause(src string) string {
	if strings.Contains(src, "\npackage ") {
		return "\n"
	}
	return "\npackage queryapi\n"
}

func TestProblemNamesFileAndLine(t *testing.T) {
	root := writeFixture(t, map[string]string{"docs/architecture.md": "# A\n\ntext\n\n`stream.Gone`\n"})
	problems, _, err := run(root, []string{"docs/architecture.md"})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || !strings.HasPrefix(problems[0], "docs/architecture.md:5: `stream.Gone`: ") {
		t.Fatalf("got %q", problems)
	}
}

func TestReport(t *testing.T) {
	var ok, bad strings.Builder
	if report(&ok, nil, "ok (1 path)") || ok.String() != "docs: ok (1 path)\n" {
		t.Fatalf("clean report: %q", ok.String())
	}
	if !report(&bad, []string{"a.md:1: x"}, "") || !strings.Contains(bad.String(), "FAIL: 1 documentation reference(s)") {
		t.Fatalf("failing report: %q", bad.String())
	}
}

func TestNotTheRoot(t *testing.T) {
	if _, _, err := run(t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "no go.mod") {
		t.Fatalf("want an error naming go.mod, got %v", err)
	}
}

// TestRepository runs the check on this repository, as scripts/test.sh
// does through scripts/check-docs.sh.
func TestRepository(t *testing.T) {
	problems, summary, err := run("../..", []string{"docs/architecture.md", "docs/security.md"})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 0 {
		t.Fatalf("%d broken references:\n%s", len(problems), strings.Join(problems, "\n"))
	}
	if !strings.Contains(summary, "ok (") {
		t.Fatalf("summary %q", summary)
	}
}

// wantOneProblem checks the fixture at root: no problem when want is "",
// else exactly one, at position at ("file:line"), containing want.
func wantOneProblem(t *testing.T, root, at, want string) {
	t.Helper()
	problems, _, err := run(root, []string{"docs/architecture.md"})
	if err != nil {
		t.Fatal(err)
	}
	if want == "" {
		if len(problems) != 0 {
			t.Fatalf("want no problem, got %q", problems)
		}
		return
	}
	if len(problems) != 1 || !strings.Contains(problems[0], want) || !strings.HasPrefix(problems[0], at+": ") {
		t.Fatalf("want one problem at %s containing %q, got %q", at, want, problems)
	}
}
