package ingest

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/materializer"
)

// waitApplied waits until applied() reached every target.
func waitApplied(t testing.TB, timeout time.Duration, applied func() map[string]uint64, targets map[string]uint64) {
	t.Helper()
	fixture.Eventually(t, timeout, func() error {
		got := applied()
		for c, want := range targets {
			if got[c] < want {
				return fmt.Errorf("cluster %s applied %d of %d (all: %v)", c, got[c], want, got)
			}
		}
		return nil
	})
}

// runMaterializer runs a materializer until the test ends.
func runMaterializer(t testing.TB, cfg materializer.Config) *materializer.Materializer {
	t.Helper()
	m, err := materializer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("materializer %s: %v", cfg.Name, err)
		}
	})
	return m
}

// tcpProxy forwards to a target and can be taken down and brought back on
// the same address, to cut a backend off as a stopped server would.
type tcpProxy struct {
	Addr   string
	target string
	mu     sync.Mutex
	l      net.Listener
	conns  map[net.Conn]bool
}

func newTCPProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{Addr: fixture.FreeAddr(t), target: target, conns: map[net.Conn]bool{}}
	if err := p.Up(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Down)
	return p
}

func (p *tcpProxy) Up() error {
	l, err := net.Listen("tcp", p.Addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return nil
}

func (p *tcpProxy) serve(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.l == nil {
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns[c], p.conns[u] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(u, c); u.Close() }()
	_, _ = io.Copy(c, u)
	c.Close()
}

// Down refuses new connections and cuts the open ones.
func (p *tcpProxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		p.l.Close()
		p.l = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}
