package watchhub

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestQueue(t *testing.T) {
	q := NewQueue[int](3)
	for i := range 3 {
		if !q.TryPush(i) {
			t.Fatalf("push %d refused below the limit", i)
		}
	}
	if q.TryPush(3) {
		t.Fatal("a full queue took a fourth item")
	}
	select {
	case <-q.Ready():
	default:
		t.Fatal("no ready token after pushes")
	}
	ctx, cancel := context.WithCancel(context.Background())
	pushed := make(chan error)
	go func() { pushed <- q.Push(ctx, 3) }() // waits for room
	var got []int
	for len(got) < 4 {
		if v, ok := q.Pop(); ok {
			got = append(got, v)
			continue
		}
		select {
		case <-q.Ready():
		case err := <-pushed:
			if err != nil {
				t.Fatal(err)
			}
			pushed = nil
		}
	}
	if pushed != nil {
		if err := <-pushed; err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(got) != "[0 1 2 3]" || q.Len() != 0 {
		t.Fatalf("popped %v, %d left", got, q.Len())
	}
	if _, ok := q.Pop(); ok {
		t.Fatal("pop from an empty queue")
	}
	for i := range 3 {
		q.TryPush(i)
	}
	blocked := make(chan error)
	go func() { blocked <- q.Push(ctx, 9) }()
	cancel()
	if err := <-blocked; !errors.Is(err, context.Canceled) {
		t.Fatalf("push on a full queue after cancel: %v", err)
	}
}
