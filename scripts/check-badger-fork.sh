#!/usr/bin/env bash
# third_party/badger must be upstream Badger (the version in the script)
# with exactly one change, third_party/badger/FLEETVIEW.patch to txn.go
# (why: third_party/badger/FLEETVIEW.md): every other library file identical,
# none missing, none added.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
version=v4.9.6
upstream=$(go mod download -json "github.com/dgraph-io/badger/v4@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$upstream" ] || { echo "FAIL: could not download badger $version" >&2; exit 1; }
fork=third_party/badger
fail=0
# The files we keep: library sources, LICENSE, go.mod/go.sum, CHANGELOG.
list() {
	(cd "$1" && find . -type f \( -name '*.go' ! -name '*_test.go' -o -name LICENSE -o -name go.mod -o -name go.sum -o -name CHANGELOG.md \) \
		! -path './badger/*' ! -path './contrib/*' ! -path './docs/*' ! -path './integration/*' ! -path './images/*' | sort)
}
if ! diff <(list "$upstream") <(list "$fork"); then
	echo "FAIL: $fork does not hold the same files as badger $version (< upstream, > fork)" >&2
	fail=1
fi
while read -r f; do
	[ "$f" = ./txn.go ] && continue
	[ -f "$fork/$f" ] || continue
	cmp -s "$upstream/$f" "$fork/$f" || { echo "FAIL: $fork/${f#./} differs from badger $version" >&2; fail=1; }
done < <(list "$upstream")
# txn.go: exactly the recorded patch.
patch=$(diff -u --label a/txn.go --label b/txn.go "$upstream/txn.go" "$fork/txn.go" || true)
if [ "$patch" != "$(cat "$fork/FLEETVIEW.patch")" ]; then
	echo "FAIL: $fork/txn.go is not badger $version plus $fork/FLEETVIEW.patch; its diff:" >&2
	echo "$patch" >&2
	fail=1
fi
exit $fail
