#!/usr/bin/env bash
# go test -exec for the integration packages (scripts/test.sh): runs one
# test binary at a time, under an flock, so that go test -p 2 links the
# next package's binary while this one runs instead of after it (a link
# of an integration test binary is about 5 s of a core, twenty of them
# one after another with -p 1). The tests themselves still run one
# package at a time, as with -p 1.
#
# go test's "ok" time of a package counts from the start of this script,
# so it includes the wait for the package before; each binary's own run
# time is appended to $FLEETVIEW_RUN_TIMES (when set), "<package dir>
# <seconds>", for scripts/test.sh to print.
set -uo pipefail
lock=${FLEETVIEW_ONE_AT_A_TIME_LOCK:-${TMPDIR:-/tmp}/fleetview-one-at-a-time.lock}
exec 9>"$lock"
flock 9
start=$(date +%s%N)
# 9>&-: the lock is this script's alone; a server a test leaves behind
# must not hold it for the next package.
"$@" 9>&-
rc=$?
if [ -n "${FLEETVIEW_RUN_TIMES:-}" ]; then
	ds=$(( ($(date +%s%N) - start) / 100000000 )) # tenths of a second
	# go test runs the binary in its package's directory.
	echo "${PWD#"$(git rev-parse --show-toplevel 2>/dev/null)/"} $((ds / 10)).$((ds % 10))s" >>"$FLEETVIEW_RUN_TIMES"
fi
exit $rc
