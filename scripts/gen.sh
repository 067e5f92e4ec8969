#!/usr/bin/env bash
# Regenerates the code beside the protos: Go, gRPC, grpc-gateway, and the
# merged OpenAPI v2 file proto/fleetview/v1/fleetview.swagger.json.
# Offline except for the Go module proxy (tools.sh builds the tools once).
# Generated files are committed; scripts/check-generated.sh verifies them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BIN="$(bash "$ROOT/scripts/tools.sh" | tail -n1)"
export PATH="$BIN:$PATH"

buf lint

# Generate into a scratch dir first, so a failing plugin leaves the tree alone.
OUT="$(mktemp -d "${TMPDIR:-/tmp}/fleetview-gen.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT
buf generate -o "$OUT"

# Then replace the previously generated files, so output of a deleted or
# renamed proto does not linger. Only files carrying a generated-code marker,
# and the OpenAPI output, are removed; the vendored proto/google has none.
while IFS= read -r -d '' f; do
  case "$f" in
    *.swagger.json) rm -f "$f" ;;
    *) if head -n1 "$f" | grep -q '^// Code generated .* DO NOT EDIT\.$'; then rm -f "$f"; fi ;;
  esac
done < <(find proto -type f \( -name '*.pb.go' -o -name '*.pb.gw.go' -o -name '*.swagger.json' \) -print0)
cp -R "$OUT/proto/." proto/

echo "gen.sh: generated code is up to date under proto/" >&2
