// Package badger is the default backend: an embedded Badger store holding
// every materialized object on disk, with the stream checkpoints committed in
// the same transaction as the objects (exactly-once in effect), and the read
// path the query API uses.
//
// Key layout (\x00-separated, so byte order is namespace, name, cluster order):
//
//	o/<group>/<version>/<resource>/<namespace>/<name>/<cluster>  -> seq, labels, object JSON
//	l/<group>/<version>/<resource>/<labelkey>/<labelvalue>/<namespace>/<name>/<cluster> -> ""
//	u/<cluster>/<group>/<version>/<resource>/<uid>               -> primary key
//	c/<cluster>                                                   -> last applied stream sequence
//
// The label index makes an equality-selected list cost the size of its
// answer, not of the resource.
//
// Memory: objects are in Badger's value log, which Badger writes through an
// mmap; the page recycler (recycle_linux.go) drops those pages once they are
// on disk, so the page cache does not grow with everything ever written.
// Badger itself comes from third_party/badger (one patch: a commit's entries
// reach the memtable in key order).
package badger
