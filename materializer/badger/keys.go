package badger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

const sep = 0

func join(parts ...string) []byte {
	n := len(parts)
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	for i, p := range parts {
		if i > 0 {
			b = append(b, sep)
		}
		b = append(b, p...)
	}
	return b
}

func gvrParts(g schema.GroupVersionResource) []string {
	return []string{g.Group, g.Version, g.Resource}
}

func objPrefix(g schema.GroupVersionResource) []byte {
	return append(join(append([]string{"o"}, gvrParts(g)...)...), sep)
}

func objKey(g schema.GroupVersionResource, ns, name, cluster string) []byte {
	return join("o", g.Group, g.Version, g.Resource, ns, name, cluster)
}

func labelPrefix(g schema.GroupVersionResource, k, v string) []byte {
	return append(join("l", g.Group, g.Version, g.Resource, k, v), sep)
}

func labelKey(g schema.GroupVersionResource, k, v, ns, name, cluster string) []byte {
	return join("l", g.Group, g.Version, g.Resource, k, v, ns, name, cluster)
}

func uidPrefix(cluster string, g schema.GroupVersionResource) []byte {
	return append(join("u", cluster, g.Group, g.Version, g.Resource), sep)
}

func uidKey(cluster string, g schema.GroupVersionResource, uid string) []byte {
	return join("u", cluster, g.Group, g.Version, g.Resource, uid)
}

func ckptKey(cluster string) []byte { return join("c", cluster) }

var ckptPrefix = []byte{'c', sep}

// tail splits the last three tokens (namespace, name, cluster) off a key.
func tail(key []byte) (ns, name, cluster string, err error) {
	parts := bytes.Split(key, []byte{sep})
	if len(parts) < 3 {
		return "", "", "", fmt.Errorf("malformed key %q", key)
	}
	n := len(parts)
	return string(parts[n-3]), string(parts[n-2]), string(parts[n-1]), nil
}

// record is the stored value of an object.
type record struct {
	seq    uint64
	labels map[string]string
	json   []byte
}

// encodeRecord encodes r into memory from alloc (which returns an empty
// slice with at least the capacity asked for).
func encodeRecord(r record, alloc func(n int) []byte) []byte {
	var arr [16]string
	keys := arr[:0]
	n := 8 + binary.MaxVarintLen64 + len(r.json)
	for k, v := range r.labels {
		keys = append(keys, k)
		n += len(k) + len(v) + 2*binary.MaxVarintLen64
	}
	// In key order, so equal objects are equal bytes (a rebuilt store can
	// be compared with the live one byte for byte).
	slices.Sort(keys)
	b := binary.BigEndian.AppendUint64(alloc(n), r.seq)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		v := r.labels[k]
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return append(b, r.json...)
}

var errCorrupt = errors.New("corrupt record")

func decodeRecord(b []byte, withLabels bool) (record, error) {
	if len(b) < 8 {
		return record{}, errCorrupt
	}
	r := record{seq: binary.BigEndian.Uint64(b)}
	b = b[8:]
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return record{}, errCorrupt
	}
	b = b[w:]
	if withLabels {
		r.labels = make(map[string]string, n)
	}
	for i := uint64(0); i < n; i++ {
		var kv [2]string
		for j := range kv {
			l, w := binary.Uvarint(b)
			if w <= 0 || uint64(len(b)-w) < l {
				return record{}, errCorrupt
			}
			kv[j] = string(b[w : w+int(l)])
			b = b[w+int(l):]
		}
		if withLabels {
			r.labels[kv[0]] = kv[1]
		}
	}
	r.json = b
	return r, nil
}
