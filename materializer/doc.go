// Package materializer consumes the cluster streams and applies them to a
// backend (a Sink), exactly once in effect: every batch is committed together
// with the stream position it reflects, and a restarted materializer resumes
// from the position its backend holds, skipping anything at or below it.
//
// It owns consumers, batching, checkpoints, routing filters and the
// dead-lettering of poison messages (deadletter.go). Per cluster stream it
// runs two stages: one (fetch.go) fetches, decodes and checks the next
// batch (protobuf decode, subject consistency, object JSON and its labels,
// and that subject, payload, stream and the object's cluster annotations
// name one cluster) while the other (applier.go) applies the current one
// to the sink. The durable consumer is recreated at the sink's checkpoint
// on every start (materializer.go), so a killed process never leaves a gap.
//
// Poison messages (undecodable, inconsistent with their subject, an object
// that is not JSON, an object annotated with another cluster than its
// stream's, or an item a sink refuses for good via PoisonError) go
// to the dead-letter stream FV_DEAD with the reason in the Fv-Reason header,
// are counted (Metrics.DeadLettered, fleetview_materializer_dead_letters_total
// in NewMetricsCollector) and never block the stream.
//
// After each commit it publishes the batch to its Observer as a feed.Batch
// in which every object event carries the state it replaced: the sink's
// word when it gives it (Badger's), otherwise the materializer's own memory
// of the objects it applied (a feed.Tracker per cluster stream), so readers
// never keep objects to tell ADDED from MODIFIED.
//
// It must not know how a backend lays out its data; backends live in
// sub-packages (badger, opensearch). Rebuilding a store is running a
// materializer with a fresh sink and another durable name (store.Rebuild,
// behind `fleetview rebuild`).
package materializer
