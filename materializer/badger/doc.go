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
package badger
