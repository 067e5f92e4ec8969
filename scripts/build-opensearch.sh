#!/usr/bin/env bash
# Builds the OpenSearch test launcher (integration/opensearch/launcher, a tiny
# Maven project that runs OpenSearch 2.19 from Maven Central jars in a plain
# JVM) and caches it OUTSIDE the repository, keyed by a hash of the pom, the
# sources and the JVM. Prints the cache directory (its only stdout line), which
# holds:
#   launcher.jar    the launcher class
#   classpath.txt   the dependency classpath (jars in the local Maven repo)
#   launcher.jsa    optional AppCDS archive for faster start (see below)
#   complete        marker written last
# Run as: java -cp "$DIR/launcher.jar:$(cat $DIR/classpath.txt)" \
#   org.fleetview.opensearch.Launcher --home DIR --http-port 0
#
# Env: FLEETVIEW_CACHE (default ~/.cache/fleetview), FLEETVIEW_JAVA (java
# binary; default $JAVA_HOME/bin/java or java on PATH), FLEETVIEW_OPENSEARCH_CDS=0
# to skip making the class-data-sharing archive.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC="$ROOT/integration/opensearch/launcher"
CACHE=${FLEETVIEW_CACHE:-$HOME/.cache/fleetview}
if [ -n "${FLEETVIEW_JAVA:-}" ]; then
  JAVA=$FLEETVIEW_JAVA
elif [ -n "${JAVA_HOME:-}" ]; then
  JAVA=$JAVA_HOME/bin/java
else
  JAVA=java
fi

die() { echo "build-opensearch: $*" >&2; exit 1; }
command -v "$JAVA" >/dev/null 2>&1 || die "java not found ($JAVA); Java 17 is needed"
command -v mvn >/dev/null 2>&1 || die "mvn not found; Maven 3.8+ is needed"
[ -f "$SRC/pom.xml" ] || die "no $SRC/pom.xml"

HASH=$(
  {
    sha256sum < "${BASH_SOURCE[0]}"
    (cd "$SRC" && find pom.xml src -type f | LC_ALL=C sort | while read -r f; do
      echo "$f"; sha256sum < "$f"
    done)
    "$JAVA" -version 2>&1
  } | sha256sum | cut -c1-16
)
OUT="$CACHE/opensearch-launcher-$HASH"

done_ok() { [ -f "$OUT/complete" ]; }
if done_ok; then echo "$OUT"; exit 0; fi

mkdir -p "$CACHE"
# Serialise concurrent builds of the same hash (parallel test packages).
exec 9>"$OUT.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if done_ok; then echo "$OUT"; exit 0; fi

TMP=$(mktemp -d "$CACHE/.opensearch-launcher-build.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

echo "build-opensearch: building launcher into $OUT (first run downloads ~50 MB of jars into ~/.m2)" >&2
# launcher.buildDir keeps Maven's target/ out of the repository.
# Maven 3.8 with -q -B still prints stray colour resets: strip them (pipefail
# keeps mvn's exit status).
mvnq() {
  mvn -q -B -f "$SRC/pom.xml" -Dlauncher.buildDir="$TMP/target" "$@" 2>&1 \
    | sed -e 's/\x1b\[[0-9;]*m//g' >&2
}
mvnq package || die "mvn package failed"
mvnq dependency:build-classpath -Dmdep.outputFile="$TMP/classpath.txt" \
  || die "mvn dependency:build-classpath failed"
[ -s "$TMP/classpath.txt" ] || die "empty classpath.txt"
cp "$TMP/target/opensearch-launcher-0.0.0.jar" "$TMP/launcher.jar" || die "no launcher jar built"
rm -rf "$TMP/target" "$OUT"
mkdir -p "$OUT"
mv "$TMP/launcher.jar" "$TMP/classpath.txt" "$OUT/"

# AppCDS: run the node once and dump the loaded classes; later starts map them
# instead of parsing ~20k classes again (roughly halves start time). The
# archive is only valid for this exact classpath string and JVM; on mismatch
# the JVM prints a warning and runs without it. Failure here is not fatal.
if [ "${FLEETVIEW_OPENSEARCH_CDS:-1}" != "0" ]; then
  echo "build-opensearch: making class-data-sharing archive" >&2
  CP="$OUT/launcher.jar:$(cat "$OUT/classpath.txt")"
  HOME_DIR="$TMP/home"
  mkdir -p "$HOME_DIR"
  mkfifo "$TMP/stdin"
  "$JAVA" -Xms512m -Xmx512m -Djava.locale.providers=SPI,COMPAT \
    -XX:ArchiveClassesAtExit="$TMP/launcher.jsa" -cp "$CP" \
    org.fleetview.opensearch.Launcher --home "$HOME_DIR" --http-port 0 \
    <"$TMP/stdin" >"$TMP/cds.out" 2>"$TMP/cds.err" &
  pid=$!
  exec 8>"$TMP/stdin" # hold stdin open; closing it stops the launcher
  ok=0
  for _ in $(seq 1 1800); do
    if grep -q '^ready ' "$TMP/cds.out" 2>/dev/null; then ok=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  exec 8>&-
  for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || true
  if [ "$ok" = 1 ] && [ -s "$TMP/launcher.jsa" ]; then
    mv "$TMP/launcher.jsa" "$OUT/launcher.jsa"
  else
    echo "build-opensearch: warning: no CDS archive made (launcher stderr follows); starts will be slower" >&2
    tail -n 30 "$TMP/cds.err" >&2 || true
    if [ "$ok" != 1 ]; then die "the launcher did not start; see above"; fi
  fi
fi

touch "$OUT/complete"
echo "$OUT"
