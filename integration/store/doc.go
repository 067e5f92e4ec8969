// Package backends tests where the hub keeps and replicates what it
// serves: registries routed to Badger or OpenSearch and rerouted while
// writes go on (materializer_routing_test.go, materializer_reroute_test.go),
// an OpenSearch server stopped during ingest and an OpenSearch cluster
// losing a node (materializer_opensearch_restart_test.go,
// opensearch_cluster_test.go), counts and relations on OpenSearch equal
// to Badger's (opensearch_relations_test.go), two serve replicas on one NATS server
// (replicas_test.go), and three hubs on a NATS JetStream cluster through
// the stream leader's kill -9, with BenchmarkNATSReplication, the cost of
// R3 (natscluster_test.go). The tests that neither stop nor restart
// OpenSearch share one node (shared_test.go); shared helpers are in
// integration/fixture.
package store
