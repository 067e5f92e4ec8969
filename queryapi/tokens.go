package queryapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/query"
)

// stateBucket holds the query API's state shared by its replicas (the
// key that seals its tokens).
const stateBucket = "fv_query"

// tokenKeyKey is the key of the token key in stateBucket.
const tokenKeyKey = "token-key"

// EnsureState creates the query API's state bucket, or moves it to
// replicas, ahead of New: a caller starting with a NATS cluster that is
// still settling retries this (New gives up after 30 seconds).
func EnsureState(ctx context.Context, js jetstream.JetStream, replicas int) error {
	_, err := stateKV(ctx, js, replicas)
	return err
}

func stateKV(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	return natsnames.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket: stateBucket, Description: "fleetview query API state", History: 1, Storage: jetstream.FileStorage,
		Replicas: replicas,
	})
}

// loadTokenKey returns the key that seals tokens, creating it once per
// installation: every replica and every restart verifies the tokens the
// others issued, so a watch resumes across a restart.
func loadTokenKey(ctx context.Context, js jetstream.JetStream, replicas int) ([]byte, error) {
	kv, err := stateKV(ctx, js, replicas)
	if err != nil {
		return nil, err
	}
	for range 3 {
		e, err := kv.Get(ctx, tokenKeyKey)
		if err == nil {
			return e.Value(), nil
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("read token key: %w", err)
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		if _, err := kv.Create(ctx, tokenKeyKey, key); err == nil {
			return key, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("store token key: %w", err)
		}
	}
	return nil, errors.New("token key: lost the creation race three times")
}

// continueToken is the payload of a continue value: the backend cursor
// bound to the request it continues.
type continueToken struct {
	Cursor string `json:"c"`
	Query  string `json:"q"`
}

// requestHash binds a continue token to the filters of its list: a token
// replayed with other filters would return a mix of two lists.
func requestHash(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:12])
}

func clustersPart(cs []string) string {
	if cs == nil {
		return "*"
	}
	s := slices.Clone(cs)
	slices.Sort(s)
	return strings.Join(s, ",")
}

// sealContinue seals a backend cursor (valid UTF-8, see query.Page) bound
// to the request hash q.
func sealContinue(s *query.Sealer, cursor, q string) string {
	if cursor == "" {
		return ""
	}
	return s.Seal(query.KindContinue, continueToken{Cursor: cursor, Query: q})
}

func openContinue(s *query.Sealer, token, q string) (string, error) {
	if token == "" {
		return "", nil
	}
	var t continueToken
	if err := s.Open(query.KindContinue, "continue", token, &t); err != nil {
		return "", err
	}
	if t.Query != q {
		return "", fmt.Errorf("%w: continue: the token belongs to a list with other filters", query.ErrInvalid)
	}
	return t.Cursor, nil
}
