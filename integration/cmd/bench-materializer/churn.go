package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// benchHistoryChurn is issue #48's ingest target measured on the issue's own
// workload ("3 x 50k Pods and a churn of 1k changes/s for 10 minutes:
// ingest with history on >= 0.9x the apply rate without it"): serve with
// history off and on, alternating, each into a fresh store that first
// catches up with the streams' n objects, then takes updates published at
// rate per second for secs seconds, spread over the objects and the k
// streams. It prints, per run, the rate applied during the churn, the
// backlog (published and not yet applied, sampled every 100 ms: its
// maximum and 99th percentile, in events and in seconds of churn), the
// time to drain it once the churn stops, and serve's CPU per event and in
// cores; then the ratio of the applied rates. benchHistory is the other
// reading: the rates when nothing paces the updates.
func benchHistoryChurn(ctx context.Context, js jetstream.JetStream, url, work, bin string, batch, n, k, rounds, rate, secs int, published uint64) error {
	flags := map[string][]string{"off": {"--history-retention", "0"}, "on": {"--history"}}
	appliedRate := map[string][]float64{}
	sent := 0 // churn updates published so far, over every run
	for r := range rounds {
		for _, mode := range []string{"off", "on"} {
			state := filepath.Join(work, "history-churn-"+mode)
			syncDisks()
			res, err := churnRun(ctx, js, url, state, bin, batch, n, k, rate, secs, published, sent, flags[mode])
			if err != nil {
				return fmt.Errorf("history %s, round %d: %w", mode, r+1, err)
			}
			published += uint64(res.sent)
			sent += res.sent
			appliedRate[mode] = append(appliedRate[mode], res.appliedRate)
			fmt.Printf("  round %d history %-3s churn %d/s for %ds: applied %7.1f events/s; backlog max %d (%.2f s), p99 %d (%.2f s); drained in %s; CPU %5.1f µs/event, %.2f cores\n",
				r+1, mode, rate, secs, res.appliedRate, res.backlogMax, float64(res.backlogMax)/float64(rate),
				res.backlogP99, float64(res.backlogP99)/float64(rate), res.drain.Round(time.Millisecond),
				float64(res.cpu.Microseconds())/float64(res.sent), res.cpu.Seconds()/float64(secs))
			if err := os.RemoveAll(state); err != nil {
				return err
			}
		}
	}
	fmt.Printf("  %-55s %.2fx (median applied rate during the churn, history on / off; target >= 0.9)\n",
		fmt.Sprintf("history on vs off at %d changes/s", rate), median(appliedRate["on"])/median(appliedRate["off"]))
	return nil
}

// churnResult is what one churnRun measured.
type churnResult struct {
	sent                   int
	appliedRate            float64 // events applied per second during the churn
	backlogMax, backlogP99 uint64
	drain                  time.Duration
	cpu                    time.Duration // serve's, during the churn and its drain
}

// churnRun starts serve on a fresh state, waits until it applied the
// streams through published, then publishes the paced updates: update j
// of the run is Pod (offset+j) mod n at a resourceVersion above any
// before it.
func churnRun(ctx context.Context, js jetstream.JetStream, url, state, bin string, batch, n, k, rate, secs int, published uint64, offset int, flags []string) (churnResult, error) {
	var res churnResult
	serve, metrics, stop, err := startServe(ctx, bin, url, state, batch, "", flags...)
	if err != nil {
		return res, err
	}
	defer stop()
	waitApplied := func(through uint64, limit time.Duration) error {
		deadline := time.Now().Add(limit)
		for {
			a, err := applied(metrics, k)
			if err == nil && a >= through {
				return nil
			}
			if !alive(serve.Process.Pid) {
				return fmt.Errorf("serve exited having applied %d of %d (log %s.log)", a, through, state)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("serve did not apply through %d in %s (applied %d, %v; log %s.log)", through, limit, a, err, state)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := waitApplied(published, 30*time.Minute); err != nil {
		return res, err
	}
	cpu0 := procCPU(serve.Process.Pid)
	start := time.Now()
	end := start.Add(time.Duration(secs) * time.Second)
	var backlog []uint64
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	lastPoll := start
	for now := start; now.Before(end); now = <-tick.C {
		// Every update due by now is published: the pace holds even if
		// a tick is late.
		for due := int(now.Sub(start).Seconds() * float64(rate)); res.sent < due; res.sent++ {
			j := offset + res.sent
			subject, payload, err := podMessage(j%n, k, 2+j/n)
			if err != nil {
				return res, err
			}
			if _, err := js.PublishAsync(subject, payload, jetstream.WithStallWait(time.Minute)); err != nil {
				return res, err
			}
		}
		if now.Sub(lastPoll) >= 100*time.Millisecond {
			lastPoll = now
			a, err := applied(metrics, k)
			if err != nil {
				return res, err
			}
			backlog = append(backlog, published+uint64(res.sent)-min(a, published+uint64(res.sent)))
		}
	}
	window := time.Since(start)
	a, err := applied(metrics, k)
	if err != nil {
		return res, err
	}
	res.appliedRate = float64(a-published) / window.Seconds()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return res, errors.New("churn publish acks did not complete in a minute")
	}
	drainStart := time.Now()
	if err := waitApplied(published+uint64(res.sent), 10*time.Minute); err != nil {
		return res, err
	}
	res.drain = time.Since(drainStart)
	res.cpu = procCPU(serve.Process.Pid) - cpu0
	if len(backlog) == 0 {
		return res, fmt.Errorf("churn of %d s sampled no backlog: want at least 1 s", secs)
	}
	slices.Sort(backlog)
	res.backlogMax = backlog[len(backlog)-1]
	res.backlogP99 = backlog[len(backlog)*99/100]
	return res, nil
}
