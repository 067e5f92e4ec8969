package query

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Sealer makes the opaque tokens the API hands out (resourceVersions and
// continue values) tamper-evident: the payload is JSON, the seal an
// HMAC-SHA256 over a kind and the payload with a key every replica of the
// query API shares. A token whose seal does not verify is ErrInvalid, so a
// client can never make the server read a snapshot or a sequence it did not
// issue.
type Sealer struct {
	key []byte
}

// NewSealer returns a sealer; the key should be at least 32 random bytes.
func NewSealer(key []byte) *Sealer { return &Sealer{key: bytes.Clone(key)} }

const tokenPrefix = "fv1."

// Token kinds: a token of one kind is never accepted as another.
const (
	KindVersion  = "rv"
	KindContinue = "continue"
)

func (s *Sealer) mac(kind string, payload []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(kind))
	m.Write([]byte{0})
	m.Write(payload)
	return m.Sum(nil)[:16]
}

// Seal renders v as a token of the given kind.
func (s *Sealer) Seal(kind string, v any) string {
	p, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("seal %s token: %v", kind, err)) // only fleetview's own types are sealed
	}
	enc := base64.RawURLEncoding
	return tokenPrefix + enc.EncodeToString(p) + "." + enc.EncodeToString(s.mac(kind, p))
}

// Open verifies a token of the given kind and decodes it into v. The field
// names the request field in errors ("resourceVersion", "continue").
func (s *Sealer) Open(kind, field, token string, v any) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: %s %q is not a valid fleetview token: %s", ErrInvalid, field, shorten(token), why)
	}
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return bad("unknown format")
	}
	ps, ms, ok := strings.Cut(rest, ".")
	if !ok {
		return bad("unknown format")
	}
	enc := base64.RawURLEncoding
	p, err := enc.DecodeString(ps)
	if err != nil {
		return bad("not base64")
	}
	m, err := enc.DecodeString(ms)
	if err != nil {
		return bad("not base64")
	}
	if !hmac.Equal(m, s.mac(kind, p)) {
		return bad("signature mismatch (tampered, or issued for another purpose or by another installation)")
	}
	if err := json.Unmarshal(p, v); err != nil {
		return bad("undecodable payload")
	}
	return nil
}

func shorten(s string) string {
	if len(s) > 48 {
		return s[:48] + "..."
	}
	return s
}

// VersionToken is the payload of a resourceVersion: the per-cluster stream
// sequences and when it was issued (tombstones expire, so a watch from a
// version older than their TTL could miss deletes and is refused).
type VersionToken struct {
	Seqs   Version `json:"c"`
	Issued int64   `json:"t"`
}

// SealVersion renders a resourceVersion.
func (s *Sealer) SealVersion(v Version, now time.Time) string {
	if v == nil {
		v = Version{}
	}
	return s.Seal(KindVersion, VersionToken{Seqs: v, Issued: now.Unix()})
}

// OpenVersion parses a resourceVersion made by SealVersion.
func (s *Sealer) OpenVersion(token string) (VersionToken, error) {
	var t VersionToken
	if err := s.Open(KindVersion, "resourceVersion", token, &t); err != nil {
		return t, err
	}
	if t.Seqs == nil {
		t.Seqs = Version{}
	}
	return t, nil
}
