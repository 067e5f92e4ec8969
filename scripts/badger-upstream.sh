# Sourced by check-badger-fork.sh and test-badger-fork.sh: the upstream
# Badger release third_party/badger is a patched copy of, and its module
# directory (downloaded from the module proxy) in $upstream.
version=v4.9.6
upstream=$(go mod download -json "github.com/dgraph-io/badger/v4@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$upstream" ] || { echo "FAIL: could not download badger $version" >&2; exit 1; }
