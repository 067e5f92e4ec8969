package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
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
