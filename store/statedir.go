package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/stream"
)

// The state directory: the live Badger store, and beside it the store
// `fleetview rebuild` replays into while the live one keeps serving.
const (
	badgerDir  = "badger"
	rebuildDir = "badger.new"
	// RebuiltMarker, in the rebuild directory, says the replay finished.
	RebuiltMarker = "REBUILT"
)

// BadgerDir is the live Badger store of a state directory.
func BadgerDir(stateDir string) string { return filepath.Join(stateDir, badgerDir) }

// RebuildDir is where a rebuild of a state directory's store is replayed.
func RebuildDir(stateDir string) string { return filepath.Join(stateDir, rebuildDir) }

// switchToRebuilt puts a finished rebuild in place of the live store. Each
// step is a rename, and every intermediate state is recognised on the next
// start, so a crash in between loses nothing.
func switchToRebuilt(stateDir string, log *slog.Logger) error {
	live, next := BadgerDir(stateDir), RebuildDir(stateDir)
	if _, err := os.Stat(filepath.Join(next, RebuiltMarker)); err != nil {
		if _, err := os.Stat(next); err == nil {
			log.Info("an unfinished rebuild is in " + next + "; run fleetview rebuild to finish it")
		}
		return nil
	}
	old := live + ".old"
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if _, err := os.Stat(live); err == nil {
		if err := os.Rename(live, old); err != nil {
			return fmt.Errorf("switch to the rebuilt store: %w", err)
		}
	}
	if err := os.Rename(next, live); err != nil {
		return fmt.Errorf("switch to the rebuilt store: %w", err)
	}
	if err := os.Remove(filepath.Join(live, RebuiltMarker)); err != nil {
		return err
	}
	log.Info("switched to the rebuilt store", "dir", live)
	return os.RemoveAll(old)
}

// ClusterStreams lists the clusters that have a stream.
func ClusterStreams(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	var out []string
	names := js.StreamNames(ctx, jetstream.WithStreamListSubject(stream.AllObjects))
	for n := range names.Name() {
		if c, ok := stream.ClusterFromStream(n); ok {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out, names.Err()
}

// replicaFile, in the state directory, names this replica on the streams.
const replicaFile = "replica-id"

// ReplicaID is the name of the serve replica a state directory belongs
// to, created on its first start. Each replica consumes every cluster
// stream under durable consumers of its own (Durable): replicas sharing
// one consumer would split the stream between them, each store holding
// part of it, and each start would delete the others' consumer.
func ReplicaID(stateDir string) (string, error) {
	path := filepath.Join(stateDir, replicaFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if !validReplicaID(id) {
			return "", fmt.Errorf("%w: %s holds %q, want 12 lowercase hex digits", ErrReplicaID, path, id)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w: %v", ErrReplicaID, err)
	}
	var raw [6]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(raw[:])
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return "", fmt.Errorf("%w: %v", ErrReplicaID, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("%w: %v", ErrReplicaID, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("%w: %v", ErrReplicaID, err)
	}
	return id, nil
}

func validReplicaID(id string) bool {
	if len(id) != 12 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Durable is the durable consumer of the materializer called name in the
// replica called replica.
func Durable(name, replica string) string { return name + "-" + replica }
