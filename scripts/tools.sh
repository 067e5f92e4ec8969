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

# installed_version BINARY: the main module version recorded in the binary
# (buf's release build records none: its --version says).
installed_version() {
  [ -x "$BIN/$1" ] || return 0
  if [ "$1" = buf ]; then echo "v$("$BIN/buf" --version 2>/dev/null)"; return 0; fi
  go version -m "$BIN/$1" 2>/dev/null | awk '$1 == "mod" { print $3; exit }'
}

# buf_release: buf's own release binary, as Buf publishes it on the npm
# registry (@bufbuild/buf-<os>-<arch>; npm checks the tarball against the
# registry's sha512). Building buf from source is most of this script's
# time on a fresh machine (about four of its five minutes on two cores).
# Without npm or for another platform, buf is built like the plugins.
buf_release() {
  local arch
  case "$(uname -s)/$(uname -m)" in
    Linux/x86_64) arch=linux-x64 ;;
    Linux/aarch64) arch=linux-aarch64 ;;
    *) return 1 ;;
  esac
  command -v npm >/dev/null 2>&1 || return 1
  local tmp
  tmp="$(mktemp -d)"
  if (cd "$tmp" && npm pack --silent "@bufbuild/buf-$arch@${BUF_VERSION#v}" >/dev/null && tar xzf ./*.tgz package/bin/buf) &&
    [ "$("$tmp/package/bin/buf" --version)" = "${BUF_VERSION#v}" ]; then
    mv "$tmp/package/bin/buf" "$BIN/buf"
    rm -rf "$tmp"
    return 0
  fi
  rm -rf "$tmp"
  return 1
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
  if [ "$name" = buf ] && buf_release; then
    echo "tools.sh: buf $version from its npm release" >&2
    continue
  fi
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
