package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/stream"
)

// envelope is one serve replica's memory through an ingest and a churn
// storm (KiB).
type envelope struct {
	limit string
	// steadyRSS/steadyAnon: after the storm, once serve was idle for
	// envelopeIdle; afterIngest*: the same after the ingest alone.
	afterIngestRSS, afterIngestAnon int64
	steadyRSS, steadyAnon           int64
	peakRSS, peakAnon               int64
	ingest, storm                   time.Duration
}

// defaultEnvelopeLimit is the --memory-limit of the envelope's second run.
const defaultEnvelopeLimit = "512Mi"

// envelopeIdle is how long serve idles before its steady state is read:
// the state a replica settles in, what the comparison is about.
const envelopeIdle = 10 * time.Second

// benchEnvelope is step 6 (issue #17): a serve replica's memory holding
// pods Pods, through their ingest and a churn storm (every Pod updated,
// one in ten relabeled, published while serve applies), without a memory
// limit and with --memory-limit limit. The cluster streams are reset
// first: the steps before leave a million objects in them.
func benchEnvelope(ctx context.Context, js jetstream.JetStream, bin, natsURL, work string, pods int, limit string) error {
	for _, l := range []string{"", limit} {
		e, err := runEnvelope(ctx, js, bin, natsURL, work, pods, l)
		if err != nil {
			return err
		}
		name := "no limit"
		if l != "" {
			name = "--memory-limit " + l
		}
		mib := func(kib int64) float64 { return float64(kib) / 1024 }
		fmt.Printf("  %-55s ingest %s, storm %s; RSS steady %.0f MiB (after ingest %.0f), peak %.0f MiB = %.2fx steady; anonymous steady %.0f MiB (after ingest %.0f), peak %.0f MiB = %.2fx steady\n",
			fmt.Sprintf("memory envelope, %d Pods, %s", pods, name), e.ingest.Round(time.Millisecond), e.storm.Round(time.Millisecond),
			mib(e.steadyRSS), mib(e.afterIngestRSS), mib(e.peakRSS), float64(e.peakRSS)/float64(e.steadyRSS),
			mib(e.steadyAnon), mib(e.afterIngestAnon), mib(e.peakAnon), float64(e.peakAnon)/float64(e.steadyAnon))
	}
	return nil
}

func runEnvelope(ctx context.Context, js jetstream.JetStream, bin, natsURL, work string, pods int, limit string) (envelope, error) {
	e := envelope{limit: limit}
	if err := js.DeleteStream(ctx, stream.StreamName(clusterName(0))); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return e, err
	}
	if _, err := js.CreateOrUpdateStream(ctx, stream.StreamConfig(clusterName(0), 1, 0)); err != nil {
		return e, err
	}
	if err := publish(js, pods, 1, 1, "jetstream publish of the envelope's Pods"); err != nil {
		return e, err
	}
	syncDisks()
	state := filepath.Join(work, "state-envelope")
	defer os.RemoveAll(state)
	metrics := freeAddr()
	args := []string{"serve", "--nats-url", natsURL, "--state-dir", state, "--grpc-addr", freeAddr(), "--http-addr", freeAddr(), "--metrics-addr", metrics}
	if limit != "" {
		args = append(args, "--memory-limit", limit)
	}
	serve := exec.CommandContext(ctx, bin, args...)
	serve.Env = append(os.Environ(), "GOMEMLIMIT=") // the flag, not the environment
	logf, err := os.Create(state + ".log")
	if err != nil {
		return e, err
	}
	defer logf.Close()
	serve.Stdout, serve.Stderr = logf, logf
	start := time.Now()
	if err := serve.Start(); err != nil {
		return e, err
	}
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
	}()
	pid := serve.Process.Pid
	// waitApplied samples the peaks every 20 ms until serve applied through
	// seq, then idles envelopeIdle, sampling on.
	waitApplied := func(seq uint64) (time.Duration, error) {
		from := time.Now()
		for {
			e.peakRSS = max(e.peakRSS, vmHWM(pid))
			e.peakAnon = max(e.peakAnon, procStatus(pid, "RssAnon"))
			a, err := applied(metrics, 1)
			if err == nil && a >= seq {
				break
			}
			if !alive(pid) {
				return 0, fmt.Errorf("serve exited having applied %d of %d (log %s.log)", a, seq, state)
			}
			if time.Since(from) > 10*time.Minute {
				return 0, fmt.Errorf("serve applied %d of %d in 10 minutes (log %s.log)", a, seq, state)
			}
			time.Sleep(20 * time.Millisecond)
		}
		took := time.Since(from)
		for idle := time.Now(); time.Since(idle) < envelopeIdle; time.Sleep(20 * time.Millisecond) {
			e.peakRSS = max(e.peakRSS, vmHWM(pid))
			e.peakAnon = max(e.peakAnon, procStatus(pid, "RssAnon"))
		}
		return took, nil
	}
	if e.ingest, err = waitApplied(uint64(pods)); err != nil {
		return e, err
	}
	e.ingest = time.Since(start) - envelopeIdle
	e.afterIngestRSS, e.afterIngestAnon = vmRSS(pid), procStatus(pid, "RssAnon")
	stormStart := time.Now()
	if err := publish(js, pods, 1, 2, "jetstream publish of the churn storm (serve applying)"); err != nil {
		return e, err
	}
	if _, err := waitApplied(uint64(2 * pods)); err != nil {
		return e, err
	}
	e.storm = time.Since(stormStart) - envelopeIdle
	e.steadyRSS, e.steadyAnon = vmRSS(pid), procStatus(pid, "RssAnon")
	e.peakRSS, e.peakAnon = max(e.peakRSS, vmHWM(pid)), max(e.peakAnon, e.steadyAnon)
	return e, nil
}
