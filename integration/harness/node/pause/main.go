// Command pause is the node harness's sandbox ("pause") image: it holds a
// pod's namespaces and does nothing until it is told to stop. No registry is
// reachable from the test machines, so the node harness builds this into an
// image (deploy/image) and imports it into containerd instead of pulling
// registry.k8s.io/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
