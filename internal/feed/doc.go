// Package feed is the committed-batch feed between the write side and the
// read side: what a materializer publishes once a batch is durable in its
// sink (Batch: the events, each with the state it replaced, and the stream
// checkpoint they bring the sink to), and what the query API's watch hub
// fans out. Both sides import this package and not each other.
//
// It owns two things:
//   - the feed types, Batch, Event and Prior;
//   - Tracker, which remembers each object's labels for a sink that does
//     not tell what an event replaced (OpenSearch's), so that every
//     published batch carries the prior state whatever the sink.
//
// It depends on nothing of fleetview but the protobuf types and
// internal/stream's definition of an object event (stream.IsObjectEvent).
package feed
