package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
)

// collectorsProcess runs one production collector (app.RunCollector, with
// the collector command's flag defaults) per "cluster=context" argument,
// each with its own NATS credentials from USERS-DIR/<cluster>.
func collectorsProcess(args []string) error {
	if len(args) < 4 {
		return fmt.Errorf("usage: bench-fleet collectors KUBECONFIG USERS-DIR NATS-URL CLUSTER=CONTEXT...")
	}
	kubeconfig, usersDir, natsURL := args[0], args[1], args[2]
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if dir := os.Getenv("FV_FLEET_PROFILE_DIR"); dir != "" {
		// The simulator's own CPU over the sync (the registry is applied
		// as this process starts), to tell its cost from the hub's.
		stopProfile, err := profileFor(filepath.Join(dir, fmt.Sprintf("%d-collectors-sync.cpu.pprof", len(args)-3)),
			time.Duration(benchutil.EnvInt("FV_FLEET_SYNC_PROFILE_SECONDS", 20))*time.Second)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(args))
	for _, a := range args[3:] {
		cluster, context, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("%q: want CLUSTER=CONTEXT", a)
		}
		var o app.CollectorOptions
		fs := pflag.NewFlagSet("collector", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse([]string{"--cluster", cluster, "--kubeconfig", kubeconfig, "--context", context,
			"--nats-url", natsURL, "--nats-user-file", filepath.Join(usersDir, cluster)}); err != nil {
			return err
		}
		if err := errors.Join(o.Validate()...); err != nil {
			return err
		}
		wg.Go(func() {
			if err := app.RunCollector(ctx, o, log.With("cluster", cluster)); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("collector %s: %w", cluster, err)
				stop()
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(slices.Collect(func(yield func(error) bool) {
		for e := range errs {
			if !yield(e) {
				return
			}
		}
	})...)
}

// profileFor writes this process's CPU profile to path for d, or until
// the returned function is called.
func profileFor(path string, d time.Duration) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		})
	}
	time.AfterFunc(d, stop)
	return stop, nil
}
