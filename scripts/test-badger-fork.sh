#!/usr/bin/env bash
# Badger's own tests on the patched fork: upstream's full module (tests
# included) from the module proxy, with third_party/badger's library files
# copied over it, then upstream's transaction, write, replay, value-log,
# iteration, table and skiplist tests, and the fork's own tests
# (fleetview_test.go in third_party/badger, skl/ and table/). Why the fork
# exists and what it changes: third_party/badger/FLEETVIEW.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/badger-upstream.sh
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
cp -r "$upstream/." "$work/"
chmod -R u+w "$work"
(cd third_party/badger && find . -type f -name '*.go' | while read -r f; do cp "$f" "$work/$f"; done)
cd "$work"
# Upstream's table tests write their tables to os.TempDir() and leave
# them there: keep them inside the work tree this script removes.
export TMPDIR="$work/tmp"
mkdir -p "$TMPDIR"
go vet ./skl/
go test -count=1 -race -run 'Sequential' ./skl/
go test -count=1 -timeout 20m ./skl/ ./y/ ./table/
go test -count=1 -timeout 20m -run 'Txn|WriteBatch|Managed|Conflict|Replay|Recover|Crash|Concurrent|Iterate|Get|Set|Delete|Stream|Load|Backup|Vlog|ValueLog|Value|Memtable|Checksum|Truncate' .
