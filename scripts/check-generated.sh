#!/usr/bin/env bash
# Fails if the committed generated code under proto/ is not what scripts/gen.sh
# produces from the current protos and buf configs. Regenerates in a temporary
# copy, so the work tree is never touched, and compares every generated file
# both ways: stale (content differs), missing (would be generated but is not
# in the tree) and orphaned (in the tree but no longer generated).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/fleetview-gencheck.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

mkdir -p "$TMP/scripts"
cp "$ROOT/buf.yaml" "$ROOT/buf.gen.yaml" "$TMP/"
cp "$ROOT/scripts/gen.sh" "$ROOT/scripts/tools.sh" "$TMP/scripts/"
cp -R "$ROOT/proto" "$TMP/proto"

if ! bash "$TMP/scripts/gen.sh" >"$TMP/gen.log" 2>&1; then
  cat "$TMP/gen.log" >&2
  echo "check-generated: scripts/gen.sh failed (see above)" >&2
  exit 1
fi

list_generated() {
  (cd "$1" && find proto -type f \( -name '*.pb.go' -o -name '*.pb.gw.go' -o -name '*.swagger.json' \) | LC_ALL=C sort)
}

bad=()
while IFS= read -r f; do
  if [ ! -f "$ROOT/$f" ]; then
    bad+=("missing: $f")
  elif ! cmp -s "$TMP/$f" "$ROOT/$f"; then
    bad+=("stale:   $f")
  fi
done < <(list_generated "$TMP")
while IFS= read -r f; do
  [ -f "$TMP/$f" ] || bad+=("orphan:  $f (no longer generated)")
done < <(list_generated "$ROOT")

if [ "${#bad[@]}" -gt 0 ]; then
  echo "check-generated: generated code is out of date:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "Run scripts/gen.sh and commit the result." >&2
  exit 1
fi
echo "check-generated: generated code is up to date" >&2
