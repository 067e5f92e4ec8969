package badger

import (
	"encoding/binary"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Keys of the history (doc.go draws them). revPrefix and revKey have the
// uid in its current form (uidForm); an older binary's keys have its text
// (textRevPrefix, history_format.go).
func revPrefix(cluster string, g schema.GroupVersionResource, uid string) []byte {
	return append(join("r", cluster, g.Group, g.Version, g.Resource, string(uidForm(uid))), sep)
}

// revBase is the part of revPrefix before the uid: the cluster's and
// resource's, made once for many uids (revPrefixIn).
func revBase(cluster string, g schema.GroupVersionResource) []byte {
	return append(join("r", cluster, g.Group, g.Version, g.Resource), sep)
}

// revPrefixIn is revPrefix of uid under base (revBase), in one
// allocation.
func revPrefixIn(base []byte, uid string) []byte {
	p := make([]byte, 0, len(base)+len(uid)+1)
	p = append(p, base...)
	if u := packUID(uid); u != nil {
		p = append(p, u...)
	} else {
		p = append(p, uid...)
	}
	return append(p, sep)
}

func revKey(cluster string, g schema.GroupVersionResource, uid string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(revPrefix(cluster, g, uid), seq)
}

// textRevKey is revKey with the uid as text, as an older binary wrote it.
func textRevKey(cluster string, g schema.GroupVersionResource, uid string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(textRevPrefixOf(cluster, g, uid), seq)
}

// textRevPrefixOf is revPrefix with the uid as text.
func textRevPrefixOf(cluster string, g schema.GroupVersionResource, uid string) []byte {
	return append(join("r", cluster, g.Group, g.Version, g.Resource, uid), sep)
}

func feedPrefix(cluster string, g schema.GroupVersionResource) []byte {
	return append(join("f", cluster, g.Group, g.Version, g.Resource), sep)
}

func feedKey(cluster string, g schema.GroupVersionResource, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(feedPrefix(cluster, g), seq)
}

// timeKey is the fleet-wide change feed's key (family 't', or 'x' for the
// deletes' own index): time, cluster, seq.
func timeKey(family byte, t int64, cluster string, seq uint64) []byte {
	b := binary.BigEndian.AppendUint64([]byte{family, sep}, uint64(t))
	b = append(append(append(b, sep), cluster...), sep)
	return binary.BigEndian.AppendUint64(b, seq)
}

// splitTimeKey reads what timeKey wrote.
func splitTimeKey(k []byte) (t int64, cluster string, seq uint64, err error) {
	if len(k) < 2+8+1+1+8 {
		return 0, "", 0, errCorrupt
	}
	t = int64(binary.BigEndian.Uint64(k[2:10]))
	cluster = string(k[11 : len(k)-9])
	seq = binary.BigEndian.Uint64(k[len(k)-8:])
	return t, cluster, seq, nil
}

func namePrefix(cluster string, g schema.GroupVersionResource, ns, name string) []byte {
	return append(join("n", cluster, g.Group, g.Version, g.Resource, ns, name), sep)
}

func nameKey(cluster string, g schema.GroupVersionResource, ns, name, uid string) []byte {
	return join("n", cluster, g.Group, g.Version, g.Resource, ns, name, uid)
}

// Per-cluster byte counters: h/ is the materializer's (bytes it wrote
// minus bytes it deleted), g/ retention's (bytes it removed), so no key
// is written by both and no key by every cluster's batches.
func addedKey(cluster string) []byte   { return join("h", cluster) }
func removedKey(cluster string) []byte { return join("g", cluster) }

// historyBegun and expiredKey are fleet-wide and written rarely: when the
// store first recorded history, and the time through which retention
// removed changes (every change observed at or before it is gone).
var (
	beganKey   = []byte{'b', sep, 'h'}
	expiredKey = []byte{'e', sep, 'h'}
)
