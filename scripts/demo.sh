#!/usr/bin/env bash
# Local demo on a fresh machine: three real member clusters (etcd +
# kube-apiserver each, built from the Go module proxy on first run), sample
# workloads in them, `fleetview up` caching them, a sample Karmada
# ResourceRegistry applied, the fleet kubeconfig written, and the kubectl and
# REST queries run with their output. Interactive: stays up until Ctrl-C.
# Non-interactive (no terminal): runs the queries and stops.
#
# The binary and the fleet kubeconfig are left in $DEMO/bin and
# $DEMO/fleet.kubeconfig; the last lines printed are the two exports that
# put them where the README's next commands find them.
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO=${FLEETVIEW_DEMO_DIR:-$(mktemp -d /tmp/fleetview-demo.XXXX)}
HTTP=${FLEETVIEW_HTTP:-127.0.0.1:8080}
GRPC=${FLEETVIEW_GRPC:-127.0.0.1:7070}
mkdir -p "$DEMO"
echo "demo directory: $DEMO"

mkdir -p "$DEMO/bin"
go build -o "$DEMO/bin/fleetview" ./cmd/fleetview
go build -o "$DEMO/bin/kubectl-fleet" ./cmd/kubectl-fleet # `kubectl fleet` with $DEMO/bin on PATH
go build -o "$DEMO/demo-fleet" ./integration/cmd/demo-fleet

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

"$DEMO/demo-fleet" -kubeconfig "$DEMO/kubeconfig" -admin-kubeconfig "$DEMO/admin-kubeconfig" >"$DEMO/fleet.log" 2>&1 &
pids+=($!)
echo "starting three member clusters (log: $DEMO/fleet.log)..."
until grep -qs '^ready' "$DEMO/fleet.log"; do
	if ! kill -0 "${pids[0]}" 2>/dev/null; then cat "$DEMO/fleet.log"; echo "member clusters failed" >&2; exit 1; fi
	sleep 2
done

"$DEMO/bin/fleetview" up --kubeconfig "$DEMO/kubeconfig" --context member1 --context member2 --context member3 \
	--state-dir "$DEMO/state" --http-addr "$HTTP" --grpc-addr "$GRPC" --nats-port -1 --history >"$DEMO/fleetview.log" 2>&1 &
pids+=($!)
echo "fleetview up (log: $DEMO/fleetview.log)"
until curl -sf "http://$HTTP/healthz" >/dev/null; do
	if ! kill -0 "${pids[1]}" 2>/dev/null; then cat "$DEMO/fleetview.log"; exit 1; fi
	sleep 1
done

"$DEMO/bin/fleetview" registry apply --server "$GRPC" -f internal/registry/testdata/seed-registry-no-backend.yaml
echo "waiting for the clusters to sync..."
for _ in $(seq 1 120); do
	n=$(curl -sf "http://$HTTP/v1/clusters" | grep -o '"synced":true' | wc -l || true)
	[ "$n" -ge 12 ] && break
	sleep 1
done

"$DEMO/bin/fleetview" kubeconfig --server "http://$HTTP" -o "$DEMO/fleet.kubeconfig" >/dev/null
export KUBECONFIG="$DEMO/fleet.kubeconfig" PATH="$DEMO/bin:$PATH"

# A query cut short by head (curl's exit 23, a SIGPIPE) is not a failure:
# pipefail is off inside run, so only the command line's last step counts.
run() { echo; echo "\$ $*"; (set +o pipefail; eval "$@"); }
run "kubectl --context fleet get pods -A | head -n 8"
run "kubectl --context fleet get deploy -n shop -o wide"
run "kubectl --context member2 get pods -n shop"
run "kubectl api-resources"
run "curl -s 'http://$HTTP/v1/clusters' | head -c 600; echo"
run "curl -s 'http://$HTTP/v1/resources/core/v1/pods?labelSelector=app%3Dcheckout&limit=3' | head -c 1200; echo"
run "curl -s 'http://$HTTP/v1/resources/apps/v1/deployments?namespace=shop&clusters=member2' | head -c 800; echo"
run "curl -s -o /dev/null -w '%{http_code}\n' 'http://$HTTP/v1/resources/apps/v1/deployments/cart?namespace=shop'"
run "fleetview registry list --server $GRPC"
run "kubectl fleet changes --since 10m --resource deploy -n shop"

cat <<MSG

Web console: http://$HTTP/console/

Try more, in a shell with the two exports below:
  kubectl --context fleet get pods -A -l app=checkout
  kubectl --context member2 get pods -n shop -w
  curl 'http://$HTTP/v1/resources/core/v1/pods?namespace=payments'
  curl 'http://$HTTP/v1/resources/apps/v1/deployments/cart?namespace=shop&cluster=member1'
  curl 'http://$HTTP/openapi.json'
  kubectl --kubeconfig $DEMO/admin-kubeconfig --context member1 -n shop delete pod frontend-0   # then list again
  kubectl fleet deleted pods -n shop          # ... and see it here, with its last state (-o yaml)
  kubectl fleet changes --since 10m           # the fleet's change feed; kubectl fleet history|diff deploy cart -n shop --cluster member1

export PATH="$DEMO/bin:\$PATH" KUBECONFIG="$DEMO/fleet.kubeconfig"
MSG
if [ -t 0 ]; then
	echo; echo "fleetview is running; Ctrl-C to stop."
	wait "${pids[1]}"
fi
