#!/usr/bin/env bash
# third_party/badger must be upstream Badger (scripts/badger-upstream.sh)
# with exactly the changes in third_party/badger/FLEETVIEW.patch (why:
# third_party/badger/FLEETVIEW.md): every other library file identical,
# none missing, none added. `--update` records the fork's current diff as
# the patch.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/badger-upstream.sh
fork=third_party/badger
fail=0
# The files we keep: library sources, LICENSE, go.mod/go.sum, CHANGELOG.
list() {
	(cd "$1" && find . -type f \( -name '*.go' ! -name '*_test.go' -o -name LICENSE -o -name go.mod -o -name go.sum -o -name CHANGELOG.md \) \
		! -path './badger/*' ! -path './contrib/*' ! -path './docs/*' ! -path './integration/*' ! -path './images/*' | LC_ALL=C sort)
}
if ! diff <(list "$upstream") <(list "$fork"); then
	echo "FAIL: $fork does not hold the same files as badger $version (< upstream, > fork)" >&2
	fail=1
fi
# Every kept file is upstream's, but for the recorded patch: the unified
# diffs of the files that differ, in the list's order, must be exactly
# FLEETVIEW.patch.
patch=$(while read -r f; do
	[ -f "$fork/$f" ] || continue
	diff -u --label "a/${f#./}" --label "b/${f#./}" "$upstream/$f" "$fork/$f" || true
done < <(list "$upstream"))
if [ "${1:-}" = --update ]; then
	# After a deliberate change to the fork: record it (then say why in
	# FLEETVIEW.md).
	echo "$patch" > "$fork/FLEETVIEW.patch"
fi
if [ "$patch" != "$(cat "$fork/FLEETVIEW.patch")" ]; then
	echo "FAIL: $fork is not badger $version plus $fork/FLEETVIEW.patch; its diff:" >&2
	echo "$patch" >&2
	fail=1
fi
exit $fail
