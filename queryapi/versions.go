package queryapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
)

// The epochs of resourceVersions (internal/query/version.go): immutable
// version vectors in one stream shared by every replica, the epoch id
// being the message's stream sequence, so any replica resolves a version
// another issued, and a restart resolves the ones issued before it.
const (
	// epochCache bounds the epochs a replica keeps decoded (each up to
	// ~8 bytes per cluster); a miss costs one direct get.
	epochCache = 256
)

// versionSubject is the subject of VersionStream's messages.
const versionSubject = natsnames.SubjectRoot + ".query.versions"

// VersionStream holds the epochs of the query API's resourceVersions:
// immutable version vectors shared by every replica, an epoch's id being
// its message's stream sequence. Not FV_-prefixed: it is no cluster's.
const VersionStream = "FVQ_VERSIONS"

// versionStreamConfig is the epochs' stream: kept for maxAge (a version
// older than the resume age is refused anyway), each epoch up to a
// cluster stream's message size.
func versionStreamConfig(replicas int, maxAge time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: VersionStream, Description: "fleetview resourceVersion epochs", Subjects: []string{versionSubject},
		Storage: jetstream.FileStorage, MaxAge: maxAge, MaxMsgSize: stream.MaxPayload, Replicas: max(replicas, 1), AllowDirect: true,
	}
}

// versionBook seals and opens resourceVersions against the shared epochs.
type versionBook struct {
	js     jetstream.JetStream
	sealer *query.Sealer
	// maxAge is how long epochs are kept: a version older than the resume
	// age is refused anyway.
	maxAge   time.Duration
	replicas int

	mu sync.Mutex
	// cur is the epoch this replica issues versions against (0: none yet).
	cur    uint64
	curVec query.Version
	cache  map[uint64]query.Version
	st     jetstream.Stream
}

func newVersionBook(js jetstream.JetStream, sealer *query.Sealer, maxAge time.Duration, replicas int) *versionBook {
	return &versionBook{js: js, sealer: sealer, maxAge: maxAge, replicas: replicas, curVec: query.Version{}, cache: map[uint64]query.Version{}}
}

func (b *versionBook) stream(ctx context.Context) (jetstream.Stream, error) {
	if b.st != nil {
		return b.st, nil
	}
	st, err := b.js.CreateOrUpdateStream(ctx, versionStreamConfig(b.replicas, b.maxAge+time.Hour))
	if err != nil {
		return nil, fmt.Errorf("version epochs stream: %w", err)
	}
	b.st = st
	return st, nil
}

// Seal renders v as a resourceVersion: the current epoch and the clusters
// that differ from it, or, when more than query.MaxVersionDelta differ, a
// new epoch holding v (one write of the whole vector, shared by every
// later version close to it).
func (b *versionBook) Seal(ctx context.Context, v query.Version, now time.Time) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := query.DiffVersion(b.curVec, v)
	if len(d) > query.MaxVersionDelta {
		st, err := b.stream(ctx)
		if err != nil {
			return "", err
		}
		ack, err := b.js.Publish(ctx, versionSubject, query.EncodeVector(v))
		if err != nil {
			return "", fmt.Errorf("store a version epoch: %w", err)
		}
		_ = st
		b.cur, b.curVec = ack.Sequence, v.Clone()
		b.remember(ack.Sequence, b.curVec)
		d = nil
	}
	return b.sealer.SealEpoch(query.EpochToken{Epoch: b.cur, Issued: now.Unix(), Delta: d}), nil
}

func (b *versionBook) remember(id uint64, v query.Version) {
	if len(b.cache) >= epochCache {
		for k := range b.cache {
			if k != b.cur {
				delete(b.cache, k)
				break
			}
		}
	}
	b.cache[id] = v
}

// open resolves a resourceVersion to its vector.
func (b *versionBook) open(ctx context.Context, rv string) (query.VersionToken, error) {
	t, err := b.sealer.OpenEpoch(rv)
	if err != nil {
		return query.VersionToken{}, err
	}
	base, err := b.epoch(ctx, t.Epoch, rv)
	if err != nil {
		return query.VersionToken{}, err
	}
	return query.VersionToken{Seqs: query.ApplyDelta(base, t.Delta), Issued: t.Issued}, nil
}

func (b *versionBook) epoch(ctx context.Context, id uint64, rv string) (query.Version, error) {
	if id == 0 {
		return query.Version{}, nil
	}
	b.mu.Lock()
	v, ok := b.cache[id]
	b.mu.Unlock()
	if ok {
		return v, nil
	}
	b.mu.Lock()
	st, err := b.stream(ctx)
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	msg, err := st.GetMsg(ctx, id)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: resourceVersion %q refers to version epoch %d, which is no longer kept; list again", query.ErrExpired, shortRV(rv), id)
	}
	if err != nil {
		return nil, fmt.Errorf("read version epoch %d: %w", id, err)
	}
	if msg.Subject != versionSubject {
		return nil, fmt.Errorf("%w: resourceVersion %q refers to epoch %d, which is not a version epoch", query.ErrInvalid, shortRV(rv), id)
	}
	v, err = query.DecodeVector(msg.Data)
	if err != nil {
		return nil, fmt.Errorf("version epoch %d: %w", id, err)
	}
	b.mu.Lock()
	b.remember(id, v)
	b.mu.Unlock()
	return v, nil
}

func shortRV(s string) string {
	if len(s) > 48 {
		return s[:48] + "..."
	}
	return s
}
