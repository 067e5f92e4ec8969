package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Stamped by the image build (deploy/image) with -ldflags "-X main.version=...
// -X main.commit=...". Linker-set strings are the one way to stamp a release
// without VCS metadata in the binary (which would make it differ with the
// checkout's state); they are never written at run time.
var (
	version = "dev"
	commit  = ""
)

// buildCommit is the stamped commit, else the one go build recorded from VCS
// (a plain `go build` in a checkout), else "unknown".
func buildCommit() string {
	if commit != "" {
		return commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{Use: "version", Short: "Print the version and the commit it was built from", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(c.OutOrStdout(), "fleetview %s commit %s %s %s/%s\n", version, buildCommit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		}}
}
