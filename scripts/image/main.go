// Command image builds fleetview's container image without a container
// engine (package deploy/image): a multi-platform OCI image index, written
// as an OCI archive (--tarball) and/or pushed to a registry (--push).
//
//	go run ./scripts/image --tarball fleetview.tar
//	ctr -n k8s.io images import fleetview.tar
//	go run ./scripts/image --push registry.example/fleetview/fleetview:0.1.0
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/deploy/image"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	var o image.Options
	fs := pflag.NewFlagSet("image", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", image.ErrInvalidOptions, fs.Args())
	}
	if err := o.Complete(ctx); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Tarball == "" && o.Push == "" {
		return fmt.Errorf("%w: give --tarball FILE and/or --push REGISTRY/REPO:TAG", image.ErrInvalidOptions)
	}
	idx, err := image.Build(ctx, o)
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	if o.Tarball != "" {
		if err := image.WriteArchiveFile(o.Tarball, o.Ref(), idx, o.Created); err != nil {
			return err
		}
		fmt.Printf("wrote %s (%s)\n", o.Tarball, o.Ref())
	}
	if o.Push != "" {
		if err := image.Push(ctx, o.Push, idx); err != nil {
			return err
		}
		fmt.Printf("pushed %s\n", o.Push)
	}
	sizes, err := image.Sizes(idx)
	if err != nil {
		return err
	}
	plats := make([]string, 0, len(sizes))
	for p := range sizes {
		plats = append(plats, p)
	}
	sort.Strings(plats)
	for _, p := range plats {
		fmt.Printf("%s: %.1f MB compressed\n", p, float64(sizes[p])/1e6)
	}
	fmt.Printf("%s@%s (version %s, commit %s)\n", o.Ref(), digest, o.Version, o.Commit)
	return nil
}
