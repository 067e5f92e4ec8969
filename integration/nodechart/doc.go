// Package nodechart installs the helm chart (deploy/helm/fleetview) with the
// image scripts/image builds on a real single-node cluster
// (integration/harness/node): a hub and two collectors, kubectl through the
// hub's Service, an upgrade to a new image, a restarted hub pod and an
// uninstall. Its test needs root, containerd, runc and the CNI plugins
// (scripts/test.sh installs them), and runs with the realnode build tag:
//
//	go test -tags realnode -count=1 -v ./integration/nodechart/
package nodechart
