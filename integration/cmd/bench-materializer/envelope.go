package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/stream"
)

// envelope is one replica's memory through an ingest and a churn storm
// (KiB). With up, the Pods' publish is part of the ingest, and the
// anonymous-memory peak is sampled from the apply on (the RSS peak is the
// kernel's high-water mark).
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

// benchEnvelope is step 6: a replica's memory holding pods
// Pods, through their ingest and a churn storm (every Pod updated, one in
// ten relabeled, published while it applies), without a memory limit and
// with --memory-limit limit. Two kinds of replica: `serve` on this
// process's NATS server (its cluster streams reset first: the steps
// before leave a million objects in them), and the all-in-one `fleetview
// up` hub, whose embedded NATS server holds the streams in the measured
// process (the helm chart's hub pods run it).
func benchEnvelope(ctx context.Context, js jetstream.JetStream, bin, natsURL, work string, pods int, limit string) error {
	for _, mode := range []string{"serve", "up"} {
		limits := []string{"", limit}
		if mode == "up" {
			// The limit's run only: the one the bound is about
			// (the suite is near its time budget).
			limits = []string{limit}
		}
		for _, l := range limits {
			e, err := runEnvelope(ctx, js, bin, natsURL, work, mode, pods, l)
			if err != nil {
				return err
			}
			name := mode + ", no limit"
			if l != "" {
				name = mode + ", --memory-limit " + l
			}
			mib := func(kib int64) float64 { return float64(kib) / 1024 }
			fmt.Printf("  %-55s ingest %s, storm %s; RSS steady %.0f MiB (after ingest %.0f), peak %.0f MiB = %.2fx steady; anonymous steady %.0f MiB (after ingest %.0f), peak %.0f MiB = %.2fx steady\n",
				fmt.Sprintf("memory envelope, %d Pods, %s", pods, name), e.ingest.Round(time.Millisecond), e.storm.Round(time.Millisecond),
				mib(e.steadyRSS), mib(e.afterIngestRSS), mib(e.peakRSS), float64(e.peakRSS)/float64(e.steadyRSS),
				mib(e.steadyAnon), mib(e.afterIngestAnon), mib(e.peakAnon), float64(e.peakAnon)/float64(e.steadyAnon))
		}
	}
	return nil
}

// runEnvelope measures one replica (mode serve or up). serve starts on
// Pods already in the stream; up starts first, and the Pods are published
// into its own NATS server while it applies them.
func runEnvelope(ctx context.Context, js jetstream.JetStream, bin, natsURL, work, mode string, pods int, limit string) (envelope, error) {
	e := envelope{limit: limit}
	state := filepath.Join(work, "state-envelope-"+mode)
	defer os.RemoveAll(state)
	metrics := freeAddr()
	args := []string{mode, "--state-dir", state, "--grpc-addr", freeAddr(), "--http-addr", freeAddr(), "--metrics-addr", metrics}
	var upNATS string
	if mode == "serve" {
		if err := resetEnvelopeStream(ctx, js, pods); err != nil {
			return e, err
		}
		args = append(args, "--nats-url", natsURL)
	} else {
		upNATS = freeAddr()
		_, port, _ := net.SplitHostPort(upNATS)
		args = append(args, "--nats-port", port)
	}
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
	if mode == "up" {
		ujs, closeNATS, err := connectEnvelopeNATS(ctx, "nats://"+upNATS)
		if err != nil {
			return e, fmt.Errorf("up's NATS server (log %s.log): %w", state, err)
		}
		defer closeNATS()
		if err := resetEnvelopeStream(ctx, ujs, pods); err != nil {
			return e, err
		}
		js = ujs
	}
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
				return 0, fmt.Errorf("%s exited having applied %d of %d (log %s.log)", mode, a, seq, state)
			}
			if time.Since(from) > 10*time.Minute {
				return 0, fmt.Errorf("%s applied %d of %d in 10 minutes (log %s.log)", mode, a, seq, state)
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
	if err := publish(js, pods, 1, 2, "jetstream publish of the churn storm ("+mode+" applying)"); err != nil {
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

// resetEnvelopeStream empties the envelope's cluster stream on js and
// publishes its Pods.
func resetEnvelopeStream(ctx context.Context, js jetstream.JetStream, pods int) error {
	if err := js.DeleteStream(ctx, stream.StreamName(clusterName(0))); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	if _, err := js.CreateOrUpdateStream(ctx, stream.StreamConfig(clusterName(0), 1, 0)); err != nil {
		return err
	}
	if err := publish(js, pods, 1, 1, "jetstream publish of the envelope's Pods"); err != nil {
		return err
	}
	syncDisks()
	return nil
}

// connectEnvelopeNATS connects to a NATS server that is starting, once
// its JetStream answers (a minute at most).
func connectEnvelopeNATS(ctx context.Context, url string) (jetstream.JetStream, func(), error) {
	deadline := time.Now().Add(time.Minute)
	for {
		nc, err := nats.Connect(url)
		if err == nil {
			js, jerr := jetstream.New(nc)
			if jerr == nil {
				if _, jerr = js.AccountInfo(ctx); jerr == nil {
					return js, nc.Close, nil
				}
			}
			nc.Close()
			err = jerr
		}
		if time.Now().After(deadline) {
			return nil, nil, err
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
}
