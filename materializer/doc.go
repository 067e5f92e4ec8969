// Package materializer consumes the cluster streams and applies them to a
// backend (a Sink), exactly once in effect: every batch is committed together
// with the stream position it reflects, and a restarted materializer resumes
// from the position its backend holds, skipping anything at or below it.
//
// It owns consumers, batching, checkpoints, routing filters and the
// dead-lettering of poison messages (deadletter.go). Every cluster stream
// is served by one fixed pool of workers (pool.go, Config.Workers), so its
// goroutines and the messages it holds do not grow with the number of
// clusters: a stream is ready when it republishes a stored message's
// headers (stream.Appended, one subscription for all streams), when its
// consumer is (re)created, and when the discovery round finds it holding
// more than was pulled (a lost republish costs one round). A worker takes
// the ready stream that waited longest, pulls what its consumer has at
// once (pull.go: a no-wait pull bounded in messages and bytes), decodes
// and checks it (fetch.go: protobuf decode, subject consistency, object
// JSON and its labels, that subject, payload, stream and the object's
// cluster annotations name one cluster, and that no delivery was lost),
// and applies it (applier.go), preparing the next batch while the one
// before commits, a few batches a turn; then the stream goes to the back
// of the queue if more is pending. The durable consumer is recreated at
// the sink's checkpoint on every start (materializer.go), so a killed
// process never leaves a gap.
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
// materializer with a fresh sink and another durable name (backends.Rebuild,
// behind `fleetview rebuild`).
package materializer
