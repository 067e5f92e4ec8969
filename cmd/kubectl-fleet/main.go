// Command kubectl-fleet is the kubectl plugin of fleetview (`kubectl fleet
// history|diff|deleted|changes`): the fleet's memory from the terminal,
// read from the hub's REST API with the kubeconfig kubectl uses. Put it on
// PATH; kubectl finds it there.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/fleetview/fleetview/cmd/kubectl-fleet/plugin"
)

func main() {
	// client-go's discovery reports a failed request through klog as well
	// as in the error the command prints: once is enough.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := plugin.NewRoot(plugin.Env{Stdout: os.Stdout, Stderr: os.Stderr}).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
