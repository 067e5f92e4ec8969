package query

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestEpochTokenRoundTrip(t *testing.T) {
	s := NewSealer([]byte("0123456789abcdef0123456789abcdef"))
	long := strings.Repeat("x", 63)
	for _, tc := range []struct {
		name string
		tok  EpochToken
		// maxLen: the rendered size stays "a few dozen bytes".
		maxLen int
	}{
		{"empty epoch, no delta", EpochToken{Issued: 1_800_000_000}, 40},
		{"epoch only", EpochToken{Epoch: 123456, Issued: 1_800_000_000}, 40},
		{"one cluster", EpochToken{Epoch: 7, Issued: 1_800_000_000, Delta: []VersionEntry{{Cluster: "c0007", Seq: 123456789}}}, 50},
		{"absent and zero", EpochToken{Epoch: 7, Issued: 1, Delta: []VersionEntry{{Cluster: "a", Absent: true}, {Cluster: "b", Seq: 0}}}, 50},
		{"full delta of long names", EpochToken{Epoch: 1 << 40, Issued: -5, Delta: []VersionEntry{{Cluster: long, Seq: 1 << 62}, {Cluster: long + "", Seq: 1}, {Cluster: "b", Seq: 2}, {Cluster: "c", Seq: 3}}}, 250},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rv := s.SealEpoch(tc.tok)
			if len(rv) > tc.maxLen {
				t.Errorf("token of %d bytes, want at most %d: %s", len(rv), tc.maxLen, rv)
			}
			got, err := s.OpenEpoch(rv)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.tok) {
				t.Errorf("opened %+v, want %+v", got, tc.tok)
			}
		})
	}
}

func TestOpenEpochRefuses(t *testing.T) {
	s := NewSealer([]byte("0123456789abcdef0123456789abcdef"))
	good := s.SealEpoch(EpochToken{Epoch: 3, Issued: 1_800_000_000, Delta: []VersionEntry{{Cluster: "a", Seq: 9}}})
	raw, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(good, "fv2."))
	// reseal signs a hand-made payload, so the decoder's checks behind the
	// seal are reached too (the server must not rely on its own seal).
	reseal := func(p []byte) string {
		return "fv2." + base64.RawURLEncoding.EncodeToString(append(p, s.mac(KindVersion, p)...))
	}
	flipped := append([]byte(nil), raw...)
	flipped[0] ^= 1
	tooMany := []byte{3, 0, MaxVersionDelta + 1}
	for i := range MaxVersionDelta + 1 {
		tooMany = append(tooMany, 1, 'a'+byte(i), 1)
	}
	for _, tc := range []struct {
		name, rv string
		err      error
		mentions string
	}{
		{"not a token", "12345", ErrInvalid, "unknown format"},
		{"not base64", "fv2.!!!", ErrInvalid, "not base64"},
		{"too short", "fv2.AAAA", ErrInvalid, "too short"},
		{"tampered", "fv2." + base64.RawURLEncoding.EncodeToString(flipped), ErrInvalid, "signature mismatch"},
		{"another installation", NewSealer([]byte("other")).SealEpoch(EpochToken{Epoch: 3}), ErrInvalid, "signature mismatch"},
		{"a continue token", s.Seal(KindContinue, map[string]string{"c": "x"}), ErrInvalid, "signature mismatch"},
		{"trailing bytes", reseal(append(raw[:len(raw)-16:len(raw)-16], 0)), ErrInvalid, "undecodable"},
		{"delta beyond the bound", reseal(tooMany), ErrInvalid, "undecodable"},
		{"empty cluster name", reseal([]byte{3, 0, 1, 0, 1}), ErrInvalid, "undecodable"},
		{"name longer than the payload", reseal([]byte{3, 0, 1, 60, 'a', 1}), ErrInvalid, "undecodable"},
		{"truncated varint", reseal([]byte{3, 0, 1, 1, 'a', 0x80}), ErrInvalid, "undecodable"},
		{"the earlier format is expired", s.SealVersion(Version{"a": 1}, time.Now()), ErrExpired, "issued before resourceVersions were epoch references"},
		{"the earlier format tampered", s.SealVersion(Version{"a": 1}, time.Now()) + "x", ErrInvalid, "resourceVersion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.OpenEpoch(tc.rv)
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.mentions) || !strings.Contains(err.Error(), "resourceVersion") {
				t.Fatalf("OpenEpoch(%q) = %v, want %v mentioning %q and resourceVersion", tc.rv, err, tc.err, tc.mentions)
			}
		})
	}
}

func TestDiffApplyVersion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		base, v Version
		delta   int
	}{
		{"same", Version{"a": 1, "b": 2}, Version{"a": 1, "b": 2}, 0},
		{"moved", Version{"a": 1, "b": 2}, Version{"a": 1, "b": 5}, 1},
		{"new cluster", Version{"a": 1}, Version{"a": 1, "c": 0}, 1},
		{"cluster gone", Version{"a": 1, "b": 2}, Version{"a": 1}, 1},
		{"from nothing", nil, Version{"a": 1, "b": 2}, 2},
		{"to nothing", Version{"a": 1}, Version{}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DiffVersion(tc.base, tc.v)
			if len(d) != tc.delta {
				t.Errorf("delta %v, want %d entries", d, tc.delta)
			}
			if got := ApplyDelta(tc.base, d); fmt.Sprint(got) != fmt.Sprint(Version(tc.v).Clone()) && !(len(got) == 0 && len(tc.v) == 0) {
				t.Errorf("base %v + %v = %v, want %v", tc.base, d, got, tc.v)
			}
		})
	}
}

func TestVectorEncoding(t *testing.T) {
	big := Version{}
	for i := range 2000 {
		big[fmt.Sprintf("c%04d", i)] = uint64(1_000_000 + i)
	}
	for _, v := range []Version{{}, {"a": 0}, {"a": 1, "prod-eu-1": 1 << 50}, big} {
		got, err := DecodeVector(EncodeVector(v))
		if err != nil || fmt.Sprint(got) != fmt.Sprint(v) {
			t.Errorf("vector %d clusters: decoded %d, %v", len(v), len(got), err)
		}
	}
	if n := len(EncodeVector(big)); n > 2000*10 {
		t.Errorf("2,000-cluster epoch is %d bytes, want at most 10 per cluster", n)
	}
	for _, b := range [][]byte{nil, {1}, {1, 0, 1}, {1, 1, 'a'}, {0, 0}, {200, 1}} {
		if _, err := DecodeVector(b); err == nil {
			t.Errorf("DecodeVector(%v) decoded", b)
		}
	}
}
