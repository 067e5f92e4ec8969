// Package rawjson owns the one hand-written JSON scanner of the hot paths:
// the collector reads and edits every listed or watched object through it,
// the materializer reads every object's labels through it, and the read
// side reads the fields a field selector names (PathValues).
//
// Decoding a Kubernetes object into map[string]any and encoding it again
// costs several times what the apiserver spends serving it, and a full
// json.Unmarshal of a 3 KB Pod costs more than everything else a backend
// does per event. Both components need only a few members, so the scanner
// finds byte ranges and leaves everything else in place.
//
// The scanner checks every byte it passes, whether it reads a value or
// skips it: a document must be one object, valid by the whole JSON grammar
// (RFC 8259: string keys, colons, commas, literals, numbers, string escapes,
// no raw control bytes) in valid UTF-8, with nothing but white space after
// it, at most MaxSize bytes and MaxDepth levels deep. Every object comes
// from a collector, which the hub does not trust, and the read side
// concatenates stored objects into list responses and watch lines as they
// are: one object that a decoder refuses, or that closed early
// (`{...},{...}`) and so adds an item of its own making, would make the
// answer invalid for every cluster. Strings are stepped over eight bytes at
// a time, to the first quote, backslash, control byte or non-ASCII byte;
// checked so, a Pod costs a fraction of json.Valid plus utf8.Valid, and
// about what the bracket-only skip it replaced did (BenchmarkCheck;
// measured: docs/benchmarks/materializer.md#figures-behind-code-comments). FuzzScan states the exact
// property: Check accepts what json.Valid and utf8.Valid both accept, as an
// object within the bounds, and nothing else.
//
// It must not know about Kubernetes beyond the layout of metadata, nor
// about NATS or any backend.
package rawjson
