package harness

import (
	"errors"
	"testing"
)

// TestLockPortRefusesAHeldPort: the machine-wide lock listenFree takes on a
// port refuses it to every other holder until the first one closes it.
// flock belongs to an open file, so a second open in this process stands
// for another test process.
func TestLockPortRefusesAHeldPort(t *testing.T) {
	const port = 9999 // below fixedPortsFrom: listenFree never picks it
	first, err := lockPort(port)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := lockPort(port); !errors.Is(err, ErrPortTaken) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("second lock of a held port: %v, want ErrPortTaken", err)
	}
	first.Close()
	again, err := lockPort(port)
	if err != nil {
		t.Fatalf("lock after the holder closed: %v", err)
	}
	again.Close()
}
