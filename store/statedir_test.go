package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestReplicaID(t *testing.T) {
	dirA, dirB := filepath.Join(t.TempDir(), "a"), t.TempDir()
	a, err := ReplicaID(dirA)
	if err != nil {
		t.Fatal(err)
	}
	if !validReplicaID(a) {
		t.Fatalf("created %q", a)
	}
	again, err := ReplicaID(dirA)
	if err != nil || again != a {
		t.Fatalf("second call: %q %v, want %q", again, err, a)
	}
	b, err := ReplicaID(dirB)
	if err != nil || b == a {
		t.Fatalf("another state dir: %q %v (first %q)", b, err, a)
	}
	if d := Durable("badger", a); d != "badger-"+a {
		t.Fatalf("Durable = %q", d)
	}
	for _, bad := range []string{"", "ABCDEF012345", "abc", "abcdef0123456", "abcdef01234g", "a.b>c*def012"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, replicaFile), []byte(bad+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if id, err := ReplicaID(dir); !errors.Is(err, ErrReplicaID) {
			t.Errorf("file holding %q: got %q, %v; want ErrReplicaID", bad, id, err)
		}
	}
}
