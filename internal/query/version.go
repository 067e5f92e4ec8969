package query

import (
	"bytes"
	"crypto/hmac"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// A resourceVersion of bounded size. The fleet-wide version is a vector
// (cluster → stream sequence) that grows with the fleet; a token carrying
// it whole was 3,257 bytes at 200 clusters. Instead the hub stores
// vectors ("epochs", immutable, shared by every replica) and a token names
// one by its id plus a delta of at most MaxVersionDelta clusters whose
// sequence differs from it: a few dozen bytes at any fleet size. An issuer
// whose delta would grow beyond that stores a new epoch (rebases).

// MaxVersionDelta bounds the clusters a resourceVersion lists beside its
// epoch, and so its size.
const MaxVersionDelta = 4

// maxClusterName is a DNS label's length limit (cluster names are labels).
const maxClusterName = 63

const epochTokenPrefix = "fv2."

// VersionEntry is one cluster of a version's delta: Absent marks a cluster
// the epoch holds and the version does not.
type VersionEntry struct {
	Cluster string
	Seq     uint64
	Absent  bool
}

// EpochToken is a resourceVersion: epoch Epoch (0: the empty vector) with
// Delta applied, issued at Issued (unix seconds; tombstones expire, so an
// old version is refused).
type EpochToken struct {
	Epoch  uint64
	Issued int64
	Delta  []VersionEntry
}

// DiffVersion lists the clusters whose sequence in v differs from base, in
// cluster order; the delta that turns base into v.
func DiffVersion(base, v Version) []VersionEntry {
	var d []VersionEntry
	for c, s := range v {
		if b, ok := base[c]; !ok || b != s {
			d = append(d, VersionEntry{Cluster: c, Seq: s})
		}
	}
	for c := range base {
		if _, ok := v[c]; !ok {
			d = append(d, VersionEntry{Cluster: c, Absent: true})
		}
	}
	slices.SortFunc(d, func(a, b VersionEntry) int { return strings.Compare(a.Cluster, b.Cluster) })
	return d
}

// ApplyDelta returns base with d applied (base is not changed).
func ApplyDelta(base Version, d []VersionEntry) Version {
	v := base.Clone()
	if v == nil {
		v = Version{}
	}
	for _, e := range d {
		if e.Absent {
			delete(v, e.Cluster)
		} else {
			v[e.Cluster] = e.Seq
		}
	}
	return v
}

// SealEpoch renders t as a resourceVersion: "fv2." and the base64url of a
// binary payload (epoch, issue time, delta) followed by its seal.
func (s *Sealer) SealEpoch(t EpochToken) string {
	p := binary.AppendUvarint(nil, t.Epoch)
	p = binary.AppendVarint(p, t.Issued)
	p = binary.AppendUvarint(p, uint64(len(t.Delta)))
	for _, e := range t.Delta {
		p = binary.AppendUvarint(p, uint64(len(e.Cluster)))
		p = append(p, e.Cluster...)
		if e.Absent {
			p = binary.AppendUvarint(p, 0)
		} else {
			p = binary.AppendUvarint(p, e.Seq+1)
		}
	}
	p = append(p, s.mac(KindVersion, p)...)
	return epochTokenPrefix + base64.RawURLEncoding.EncodeToString(p)
}

// errOldToken: a sealed resourceVersion of the first format (the whole
// vector), which this version no longer resolves.
var errOldToken = errors.New("issued before resourceVersions were epoch references; list again")

// OpenEpoch verifies and decodes a resourceVersion made by SealEpoch. A
// valid token of the earlier format is ErrExpired (the client relists),
// anything else that does not verify ErrInvalid.
func (s *Sealer) OpenEpoch(token string) (EpochToken, error) {
	var t EpochToken
	bad := func(why string) error {
		return fmt.Errorf("%w: resourceVersion %q is not a valid fleetview token: %s", ErrInvalid, shorten(token), why)
	}
	if strings.HasPrefix(token, tokenPrefix) {
		var old VersionToken
		if err := s.Open(KindVersion, "resourceVersion", token, &old); err != nil {
			return t, err
		}
		return t, fmt.Errorf("%w: resourceVersion %q was %s", ErrExpired, shorten(token), errOldToken)
	}
	rest, ok := strings.CutPrefix(token, epochTokenPrefix)
	if !ok {
		return t, bad("unknown format")
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return t, bad("not base64")
	}
	const macLen = 16
	if len(b) < macLen+3 {
		return t, bad("too short")
	}
	p, m := b[:len(b)-macLen], b[len(b)-macLen:]
	if !hmac.Equal(m, s.mac(KindVersion, p)) {
		return t, bad("signature mismatch (tampered, or issued for another purpose or by another installation)")
	}
	r := bytes.NewReader(p)
	if t.Epoch, err = binary.ReadUvarint(r); err != nil {
		return t, bad("undecodable payload")
	}
	if t.Issued, err = binary.ReadVarint(r); err != nil {
		return t, bad("undecodable payload")
	}
	n, err := binary.ReadUvarint(r)
	if err != nil || n > MaxVersionDelta {
		return t, bad("undecodable payload")
	}
	for range n {
		l, err := binary.ReadUvarint(r)
		if err != nil || l == 0 || l > maxClusterName || int(l) > r.Len() {
			return t, bad("undecodable payload")
		}
		name := make([]byte, l)
		_, _ = r.Read(name)
		seq, err := binary.ReadUvarint(r)
		if err != nil {
			return t, bad("undecodable payload")
		}
		e := VersionEntry{Cluster: string(name), Absent: seq == 0}
		if seq > 0 {
			e.Seq = seq - 1
		}
		t.Delta = append(t.Delta, e)
	}
	if r.Len() != 0 {
		return t, bad("undecodable payload")
	}
	return t, nil
}

// EncodeVector renders an epoch's vector for storage: per cluster, in
// order, its name and sequence (about 8 bytes per cluster with short
// names, instead of ~16 in the JSON token).
func EncodeVector(v Version) []byte {
	cs := v.Clusters()
	p := binary.AppendUvarint(nil, uint64(len(cs)))
	for _, c := range cs {
		p = binary.AppendUvarint(p, uint64(len(c)))
		p = append(p, c...)
		p = binary.AppendUvarint(p, v[c])
	}
	return p
}

// DecodeVector reverses EncodeVector.
func DecodeVector(b []byte) (Version, error) {
	r := bytes.NewReader(b)
	n, err := binary.ReadUvarint(r)
	if err != nil || n > uint64(len(b)) {
		return nil, errors.New("undecodable version vector")
	}
	v := make(Version, n)
	for range n {
		l, err := binary.ReadUvarint(r)
		if err != nil || l == 0 || l > maxClusterName || int(l) > r.Len() {
			return nil, errors.New("undecodable version vector")
		}
		name := make([]byte, l)
		_, _ = r.Read(name)
		s, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, errors.New("undecodable version vector")
		}
		v[string(name)] = s
	}
	if r.Len() != 0 {
		return nil, errors.New("undecodable version vector")
	}
	return v, nil
}

// IssuedAt is the time a token was issued.
func (t EpochToken) IssuedAt() time.Time { return time.Unix(t.Issued, 0) }

// SealDelta renders v against the empty epoch, which needs no stored
// vector: possible when v holds at most MaxVersionDelta clusters.
func (s *Sealer) SealDelta(v Version, now time.Time) (string, bool) {
	if len(v) > MaxVersionDelta {
		return "", false
	}
	return s.SealEpoch(EpochToken{Issued: now.Unix(), Delta: DiffVersion(nil, v)}), true
}
