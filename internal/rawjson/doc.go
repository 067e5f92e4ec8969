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
// The scanner is strict about structure: a document must be one object
// with nothing but white space after it, brackets must match, every object
// is string keys, colons and commas, every array is values and commas, and
// true, false, null and numbers follow the JSON grammar. That the object
// ends exactly where its brackets do matters beyond this package: list
// responses concatenate stored objects, so an object that closed early
// (`{...},{...}`) would add an item of its own making. What it does not
// check is the inside of strings (control characters, escape sequences,
// UTF-8): strings are skipped from quote to quote with a vectorised search,
// which is most of the scan's speed. Strings that are decoded (String,
// Labels) are checked when they are decoded.
//
// It must not know about Kubernetes beyond the layout of metadata, nor
// about NATS or any backend.
package rawjson
