// Package watchhub owns the watch hub: the materializer's Observer, which
// fans committed batches out to the watches that may need them, and the
// queues between them.
//
// Design decisions:
//
//   - The hub never blocks the materializer: a watch whose subscription
//     falls more than the hub's buffer behind is cut (Overflow), not
//     waited for. It keeps no objects, only, per cluster, the last
//     sequence it has passed on (handed to a new subscription atomically
//     with its registration, so a watch misses nothing).
//   - Watches are indexed by an equality requirement of their label
//     selector, or by their clusters, so an event wakes only the watches
//     it may concern; the previous labels and whether the object existed
//     come with the event (feed.Prior).
//   - An Event decodes its object's labels, builds its Struct and seals
//     its resourceVersion (Token, through the query API's version book)
//     once, however many watches send it.
//   - Queues are slices, not buffered channels: a channel's buffer is
//     allocated at full capacity and scanned by the garbage collector on
//     every cycle, a queue holds only what is queued.
//
// How a watch judges each event (its start, resume and the events it
// sends) is the query service's (queryapi's watch*.go); this package
// knows no service and never imports queryapi.
package watchhub
