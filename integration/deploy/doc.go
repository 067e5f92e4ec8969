// Package deploy tests fleetview as it is installed and run: the helm
// chart rendered and validated by a real kube-apiserver (chart_test.go,
// with testdata/servicemonitor-crd.yaml), the CLI's registry commands
// (cli_test.go), the chart's topology of a hub and a remote collector over
// mTLS (hub_test.go), `fleetview up`'s defaults for a fleet of 300
// clusters (fleet_defaults_test.go), `fleetview up` end to end
// (e2e_test.go), and the README's quick start, scripts/demo.sh, as typed
// (demo_test.go). Shared helpers are in integration/fixture.
package deploy
