package badger

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

var (
	labelsPart = regexp.MustCompile(`"labels":\{[^}]*\}`)
	phasePart  = regexp.MustCompile(`"phase":"[^"]*"`)
)

// relUIDChange is how TestUIDEntryVouchesForRelations changes a live
// object: what the uid entry's hash (relMetaHash) must tell apart.
var relUIDChanges = []string{"status only", "labels only", "relations only", "all", "new uid", "delete"}

// setUIDHashes rewrites the hash of every third uid entry as a binary
// without relMetaHash wrote it (metaHash of the record's labels and the
// search text), and of every third after it as another hash function's
// (random): what a store written before holds.
func setUIDHashes(t *testing.T, s *Store, rng *rand.Rand) (plain, other int) {
	t.Helper()
	err := s.db.Update(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{'u', sep}})
		var keys, vals [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				it.Close()
				return err
			}
			keys, vals = append(keys, it.Item().KeyCopy(nil)), append(vals, v)
		}
		it.Close()
		for i, v := range vals {
			_, rest, err := cutString(v[1:])
			if err == nil {
				_, rest, err = cutString(rest)
			}
			if err != nil || len(rest) < 8 {
				return fmt.Errorf("uid entry %q: %v", v, err)
			}
			at := len(v) - len(rest)
			switch i % 3 {
			case 0:
				// The object key of this entry: its record and search text.
				parts := strings.Split(string(keys[i]), string(rune(sep)))
				var u uidState
				if u, err = decodeUIDEntry(v, schema.GroupVersionResource{Group: parts[2], Version: parts[3], Resource: parts[4]}, parts[1]); err != nil {
					return err
				}
				rec, err := txn.Get(u.obj)
				if err != nil {
					return err
				}
				rv, err := rec.ValueCopy(nil)
				if err != nil {
					return err
				}
				r, err := decodeRecord(rv, true)
				if err != nil {
					return err
				}
				st, err := txn.Get(append([]byte{'s'}, u.obj[1:]...))
				if err != nil {
					return err
				}
				text, err := st.ValueCopy(nil)
				if err != nil {
					return err
				}
				binary.BigEndian.PutUint64(v[at:], metaHash(r.labels, text))
				plain++
			case 1:
				binary.BigEndian.PutUint64(v[at:], rng.Uint64())
				other++
			default:
				continue
			}
			if err := txn.Set(keys[i], v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return plain, other
}

// TestUIDEntryVouchesForRelations: an update whose uid entry holds the
// hash it would write (relMetaHash) keeps its E/ entry unread, and one
// whose relations changed but not its labels learns that from the E/
// header, not the record. Over random rounds of status, label and
// relation changes, new uids and deletes, with a third of the uid
// entries rewritten each round with the hash of a binary without
// relMetaHash and a third with another hash, the label, search and
// relationship entries (l/ s/ E/ but the empty ones, R/ Q/) are, key for key, those of a
// store the live objects were applied to once.
func TestUIDEntryVouchesForRelations(t *testing.T) {
	s := openQuiet(t)
	rng := rand.New(rand.NewPCG(49, 11))
	fleet := randFleet()
	clusters := []string{"c1", "c2"}
	type liveObj struct{ uid, body string }
	live := map[string]map[int]liveObj{"c1": {}, "c2": {}}
	seqs := map[string]uint64{}
	changes := map[string]int{}
	plain, other := 0, 0
	for round := range 10 {
		if round > 0 {
			p, o := setUIDHashes(t, s, rng)
			plain, other = plain+p, other+o
		}
		for _, c := range clusters {
			var evs []feed.Event
			for range 60 {
				i := rng.IntN(len(fleet))
				o := fleet[i]
				cur, ok := live[c][i]
				e := &fleetviewv1.ResourceEvent{Cluster: c, Gvr: stream.ProtoGVR(o.gvr), Kind: o.kind, Namespace: o.ns, Name: o.name,
					ResourceVersion: fmt.Sprint(round + 1), Namespaced: !o.clustered, Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT}
				change := relUIDChanges[rng.IntN(len(relUIDChanges))]
				if !ok {
					change = "new uid"
				}
				o.uid = cur.uid
				if change == "new uid" {
					o.uid = fmt.Sprintf("%s-%d-%d-%d", c, i, round, rng.IntN(1000))
				}
				fresh := randBody(rng, o)
				body := fresh
				switch change {
				case "delete":
					e.Type, e.Uid = fleetviewv1.EventType_EVENT_TYPE_DELETE, cur.uid
					delete(live[c], i)
				case "status only":
					body = phasePart.ReplaceAllString(cur.body, phasePart.FindString(fresh))
				case "labels only":
					body = labelsPart.ReplaceAllString(cur.body, labelsPart.FindString(fresh))
				case "relations only":
					body = labelsPart.ReplaceAllString(fresh, labelsPart.FindString(cur.body))
				}
				if e.Type == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
					e.Uid, e.Object = o.uid, []byte(body)
					live[c][i] = liveObj{o.uid, body}
				}
				changes[change]++
				seqs[c]++
				evs = append(evs, feed.Event{Seq: seqs[c], Event: e})
			}
			if err := s.Apply(context.Background(), c, evs, seqs[c]); err != nil {
				t.Fatal(err)
			}
		}
		ref := openQuiet(t)
		for _, c := range clusters {
			var evs []feed.Event
			for i, l := range live[c] {
				o := fleet[i]
				evs = append(evs, feed.Event{Seq: uint64(len(evs) + 1), Event: &fleetviewv1.ResourceEvent{Cluster: c, Gvr: stream.ProtoGVR(o.gvr), Kind: o.kind,
					Namespace: o.ns, Name: o.name, ResourceVersion: "1", Namespaced: !o.clustered, Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT,
					Uid: l.uid, Object: []byte(l.body)}})
			}
			if len(evs) > 0 {
				if err := ref.Apply(context.Background(), c, evs, uint64(len(evs))); err != nil {
					t.Fatal(err)
				}
			}
		}
		families := func(m map[string]string) map[string]string {
			out := map[string]string{}
			for k, v := range m {
				switch k[0] {
				case 'E':
					// The first object of a kind without relations in a
					// process has an empty E/ entry, the others none
					// (relate): which one was first differs.
					if rel, err := decodeRelations([]byte(v)); err != nil || !rel.Empty() {
						out[k] = v
					}
				case 'l', 's', 'R', 'Q':
					out[k] = v
				}
			}
			return out
		}
		want, have := families(storeContents(t, ref)), families(storeContents(t, s))
		for k, v := range want {
			if hv, ok := have[k]; !ok || hv != v {
				t.Fatalf("round %d: key %q: %q (present %v), applied once %q", round, k, hv, ok, v)
			}
		}
		for k := range have {
			if _, ok := want[k]; !ok {
				t.Fatalf("round %d: key %q not written when the live objects are applied once", round, k)
			}
		}
	}
	for _, c := range relUIDChanges {
		if changes[c] < 50 {
			t.Fatalf("changes %v: too few of %q", changes, c)
		}
	}
	if plain == 0 || other == 0 {
		t.Fatalf("uid entries rewritten: %d with the plain hash, %d with another", plain, other)
	}
	t.Logf("changes %v; uid entries rewritten: %d with the plain hash, %d with another", changes, plain, other)
}
