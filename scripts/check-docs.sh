#!/usr/bin/env bash
# The docs point at what exists: every file path and Go identifier that
# docs/architecture.md and docs/security.md cite in backticks, and every
# relative markdown link (and its #anchor) in the repository's markdown
# files, every Go file a package's doc.go names, and every test,
# benchmark or fuzz target a Go comment or a page names (the dated records
# in docs/benchmarks/ aside). scripts/checkdocs/main.go
# says what counts as a citation and how each is resolved. A few seconds; run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/checkdocs" ./scripts/checkdocs
"$bin/checkdocs" "$@"
