#!/usr/bin/env bash
# Installs the protobuf code-generation tools (buf and the four protoc plugins)
# with `go install pkg@version` into a cache outside the repository:
#   ${FLEETVIEW_CACHE:-$HOME/.cache/fleetview}/tools/bin
# A tool already there at the pinned version is not rebuilt. The last line
# printed on stdout is the bin dir (progress goes to stderr), so callers can do
#   PATH="$(scripts/tools.sh | tail -n1):$PATH"
# Only the Go module proxy is needed: no buf registry, no remote plugins.
set -euo pipefail

# Pinned versions. grpc-gateway's plugins follow
# github.com/grpc-ecosystem/grpc-gateway/v2 in go.mod and protoc-gen-go follows
# google.golang.org/protobuf in go.mod, so generated code matches the runtime.
BUF_VERSION=v1.75.0
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
GRPC_GATEWAY_VERSION=v2.33.0

CACHE="${FLEETVIEW_CACHE:-$HOME/.cache/fleetview}"
BIN="$CACHE/tools/bin"
mkdir -p "$BIN"

# binary  package  module-version
TOOLS=(
  "buf                     github.com/bufbuild/buf/cmd/buf                                    $BUF_VERSION"
  "protoc-gen-go           google.golang.org/protobuf/cmd/protoc-gen-go                       $PROTOC_GEN_GO_VERSION"
  "protoc-gen-go-grpc      google.golang.org/grpc/cmd/protoc-gen-go-grpc                      $PROTOC_GEN_GO_GRPC_VERSION"
  "protoc-gen-grpc-gateway github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway $GRPC_GATEWAY_VERSION"
  "protoc-gen-openapiv2    github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2    $GRPC_GATEWAY_VERSION"
)

# installed_version BINARY: the main module version recorded in the binary.
installed_version() {
  [ -x "$BIN/$1" ] || return 0
  go version -m "$BIN/$1" 2>/dev/null | awk '$1 == "mod" { print $3; exit }'
}

# Build outside any module so the repo's go.mod (and GOFLAGS=-mod=...) never
# influences tool builds; pkg@version builds use the tool's own go.mod.
cd "${TMPDIR:-/tmp}"
export GOBIN="$BIN" GOWORK=off GOFLAGS=-trimpath CGO_ENABLED=0

pids=() names=()
for t in "${TOOLS[@]}"; do
  read -r name pkg version <<<"$t"
  have="$(installed_version "$name")"
  if [ "$have" = "$version" ]; then
    continue
  fi
  echo "tools.sh: installing $name $version${have:+ (had $have)}" >&2
  go install "$pkg@$version" &
  pids+=("$!") names+=("$name")
done

fail=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "tools.sh: FAILED to install ${names[$i]}" >&2
    fail=1
  fi
done
[ "$fail" = 0 ] || exit 1

echo "$BIN"
