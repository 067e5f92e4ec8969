// Command fleetview gets, lists and watches Kubernetes resources across a
// fleet of member clusters from a central cache. See README.md.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/cmd/fleetview/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var verbose bool
	root := &cobra.Command{Use: "fleetview", Short: "One cache to get, list and watch resources across member clusters", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "debug logging")
	logger := func() *slog.Logger {
		lvl := slog.LevelInfo
		if verbose {
			lvl = slog.LevelDebug
		}
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	}

	up := &app.UpOptions{}
	upCmd := &cobra.Command{Use: "up", Short: "Run everything in one process: embedded NATS, collectors for the given contexts, Badger cache, query API",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return app.RunUp(c.Context(), *up, logger()) }}
	up.AddFlags(upCmd.Flags())

	serve := &app.ServeOptions{}
	serveCmd := &cobra.Command{Use: "serve", Short: "Run the materializers (Badger; OpenSearch for registries with backendStore.openSearch) and the query API against a NATS server",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return app.RunServe(c.Context(), *serve, logger()) }}
	serve.AddFlags(serveCmd.Flags())

	rebuild := &app.RebuildOptions{}
	rebuildCmd := &cobra.Command{Use: "rebuild", Short: "Replay the streams into a fresh Badger store while the live one keeps serving; the next serve/up switches to it",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return app.RunRebuild(c.Context(), *rebuild, logger()) }}
	rebuild.AddFlags(rebuildCmd.Flags())

	col := &app.CollectorOptions{}
	colCmd := &cobra.Command{Use: "collector", Short: "Mirror one member cluster into its JetStream stream",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return app.RunCollector(c.Context(), *col, logger()) }}
	col.AddFlags(colCmd.Flags())

	kc := &cli.KubeconfigOptions{}
	kcCmd := &cobra.Command{Use: "kubeconfig", Short: "Write a kubeconfig for kubectl: a \"fleet\" context (every cluster) and one context per member cluster",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return cli.RunKubeconfig(c.Context(), *kc, c.OutOrStdout()) }}
	kc.AddFlags(kcCmd.Flags())

	root.AddCommand(upCmd, serveCmd, rebuildCmd, colCmd, kcCmd, newRegistryCmd(), newVersionCmd())
	return root
}

func newRegistryCmd() *cobra.Command {
	var server, file string
	var dial cli.RegistryDialOptions
	cmd := &cobra.Command{Use: "registry", Short: "Manage ResourceRegistries (what to cache, from which clusters)"}
	cmd.PersistentFlags().StringVar(&server, "server", "127.0.0.1:7070", "gRPC address of the query API")
	cmd.PersistentFlags().StringVar(&dial.CAFile, "certificate-authority", "", "CA of the query API's serving certificate: set, the connection is TLS (the helm chart's hub serves TLS; its CA is ca.crt of <release>-hub-tls)")
	cmd.PersistentFlags().StringVar(&dial.TokenFile, "token-file", "", "file holding a bearer token (one of the API's --token-auth-file)")
	with := func(c *cobra.Command, f func(*cli.RegistryClient) error) error {
		rc, err := cli.DialRegistry(server, c.OutOrStdout(), dial)
		if err != nil {
			return err
		}
		defer rc.Close()
		return f(rc)
	}
	apply := &cobra.Command{Use: "apply -f FILE", Short: "Create or replace registries from a YAML or JSON file", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("-f FILE is required")
			}
			return with(c, func(r *cli.RegistryClient) error { return r.Apply(c.Context(), file) })
		}}
	apply.Flags().StringVarP(&file, "filename", "f", "", "file to apply (- for stdin)")
	get := &cobra.Command{Use: "get NAME", Short: "Print a registry", Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, a []string) error {
			return with(c, func(r *cli.RegistryClient) error { return r.Get(c.Context(), a[0]) })
		}}
	list := &cobra.Command{Use: "list", Short: "List registries", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return with(c, func(r *cli.RegistryClient) error { return r.List(c.Context()) })
		}}
	del := &cobra.Command{Use: "delete NAME", Short: "Delete a registry", Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, a []string) error {
			return with(c, func(r *cli.RegistryClient) error { return r.Delete(c.Context(), a[0]) })
		}}
	cmd.AddCommand(apply, get, list, del)
	return cmd
}
