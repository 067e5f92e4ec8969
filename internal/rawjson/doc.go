// Package rawjson owns the one hand-written JSON scanner of the hot paths:
// the collector reads and edits every listed or watched object through it,
// and the materializer reads every object's labels through it.
//
// Decoding a Kubernetes object into map[string]any and encoding it again
// costs several times what the apiserver spends serving it, and a full
// json.Unmarshal of a 3 KB Pod costs more than everything else a backend
// does per event. Both components need only a few members, so the scanner
// finds byte ranges and leaves everything else in place.
//
// The scanner is strict where it reads and cheap where it skips. A
// document must be one object with nothing but white space after it; the
// members of that object, and of every object a caller looks into
// (metadata, labels), are checked in full: string keys, colons, commas,
// and literals and numbers by the JSON grammar. A value the caller skips
// is checked for matching brackets and terminated strings only, not the
// commas, colons or scalars inside: that costs about what the old bracket
// count did, while the full grammar there cost 5% of Labels on a Pod. That
// the object ends exactly where its brackets do matters beyond this
// package: list responses concatenate stored objects, so an object that
// closed early (`{...},{...}`) would add an item of its own making.
// Strings are never checked inside (control characters, escapes, UTF-8):
// they are skipped from quote to quote with a vectorised search, which is
// most of the scan's speed; the strings that are decoded (String, Labels)
// are checked when they are. FuzzScan states the exact property.
//
// It must not know about Kubernetes beyond the layout of metadata, nor
// about NATS or any backend.
package rawjson
