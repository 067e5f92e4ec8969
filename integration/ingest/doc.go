// Package ingest tests the write side against real components: the
// collector binary against a real kube-apiserver and NATS JetStream
// (collector_test.go), the materializer into Badger and OpenSearch
// (materializer_test.go) and `fleetview serve` and `rebuild` killed -9
// while they ingest (materializer_process_test.go), and what a cluster's
// NATS credential can do on a hub with per-cluster users: reach only its
// own cluster (nats_permissions_test.go), stay within its quotas
// (nats_quotas_test.go), and neither a forged inventory record
// (forged_record_test.go) nor a malformed object (malformed_object_test.go)
// can break what the hub serves for the other clusters. Shared helpers are
// in integration/fixture.
package ingest
