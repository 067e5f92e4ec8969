package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	itos "github.com/fleetview/fleetview/integration/opensearch"
	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/materializer"
	"github.com/fleetview/fleetview/store/opensearch"
)

// benchOpenSearch applies the first osN events (of k streams) into a real
// OpenSearch node through the materializer's OpenSearch sink.
func benchOpenSearch(ctx context.Context, nc *nats.Conn, k, osN, heap, osBatch int) error {
	node, err := itos.Start(ctx, itos.Options{HeapMB: heap})
	if err != nil {
		return err
	}
	defer node.Stop()
	fullText, noRefresh := os.Getenv("FV_BENCH_OPENSEARCH_FULLTEXT_OBJECT") == "1", os.Getenv("FV_BENCH_OPENSEARCH_REFRESH") == "0"
	st, err := opensearch.Open(opensearch.Options{Addresses: []string{node.URL()}, FullTextObject: fullText, NoRefresh: noRefresh,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	perCluster := uint64(osN / k)
	limited := &limitSink{Sink: st, max: perCluster}
	m, err := materializer.New(materializer.Config{Name: "bench-opensearch", NATS: nc, Sink: limited, BatchSize: osBatch, FlushInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- m.Run(mctx) }()
	for osApplied(m, k) < perCluster*uint64(k) {
		select {
		case <-ctx.Done():
			cancel()
			<-done
			return ctx.Err()
		case err := <-done:
			cancel()
			return fmt.Errorf("opensearch materializer: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	osDur := time.Since(start)
	cancel()
	<-done
	report(fmt.Sprintf("opensearch apply (bulk %d, full-text object %v, refresh per bulk %v)", osBatch, fullText, !noRefresh), int(perCluster)*k, osDur, "")
	return nil
}

// limitSink stops the OpenSearch run after max events, so the figure is
// for exactly the events asked for.
type limitSink struct {
	materializer.Sink
	max uint64
}

func (l *limitSink) Apply(ctx context.Context, cluster string, evs []feed.Event, lastSeq uint64) error {
	if lastSeq > l.max {
		for i, e := range evs {
			if e.Seq > l.max {
				evs = evs[:i]
				break
			}
		}
	}
	return l.Sink.Apply(ctx, cluster, evs, lastSeq)
}

func osApplied(m *materializer.Materializer, k int) uint64 {
	var n uint64
	a := m.Applied()
	for c := range k {
		n += a[clusterName(c)]
	}
	return n
}
