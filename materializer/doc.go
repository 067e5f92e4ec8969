// Package materializer consumes the cluster streams and applies them to a
// backend (a Sink), exactly once in effect: every batch is committed together
// with the stream position it reflects, and a restarted materializer resumes
// from the position its backend holds, skipping anything at or below it.
//
// It owns consumers, batching, checkpoints and dead-lettering of poison
// messages. It must not know how a backend lays out its data; backends live
// in sub-packages (badger, opensearch).
package materializer
