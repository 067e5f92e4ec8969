package plugin

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/internal/hubclient"
)

// Env is what the commands write to and the clock they read.
type Env struct {
	Stdout, Stderr io.Writer
	// Now is the clock --since durations count back from; nil: time.Now.
	Now func() time.Time
}

func (e Env) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// Options are the flags every command shares.
type Options struct {
	Kube hubclient.KubeOptions
	// Namespace and AllNamespaces as kubectl's -n and -A.
	Namespace     string
	AllNamespaces bool
	// Cluster is one member cluster (--cluster); empty: the context's
	// member, else every cluster.
	Cluster string
	// Since and Until bound the changes: a duration back from now (1h) or
	// an RFC 3339 time.
	Since, Until string
	// Output is "" (a table), json or yaml.
	Output string
	// ChunkSize is the page size asked of the hub (every page is read).
	ChunkSize int64
}

// AddFlags registers the shared flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kube.Kubeconfig, "kubeconfig", "", "kubeconfig of the hub, as \"fleetview kubeconfig\" writes it (default KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.Kube.Context, "context", "", "kubeconfig context (a member's context defaults --cluster to it)")
	fs.StringVar(&o.Kube.Server, "server", "", "hub URL, overriding the context's server")
	fs.StringVar(&o.Kube.Token, "token", "", "bearer token, overriding the context's credentials")
	fs.StringVarP(&o.Namespace, "namespace", "n", "", "namespace")
	fs.StringVar(&o.Cluster, "cluster", "", "member cluster")
	fs.StringVar(&o.Since, "since", "", "only changes at or after this: a duration back from now (1h, 30m) or an RFC 3339 time")
	fs.StringVar(&o.Until, "until", "", "only changes before this: a duration back from now or an RFC 3339 time")
	fs.StringVarP(&o.Output, "output", "o", "", "output format: json or yaml (default: a table)")
	fs.Int64Var(&o.ChunkSize, "chunk-size", 500, "changes asked of the hub per page (every page is read)")
}

// Validate reports every problem at once, each naming its flag.
func (o *Options) Validate(now time.Time) []error {
	var errs []error
	for _, f := range [][2]string{{"--since", o.Since}, {"--until", o.Until}} {
		flag, v := f[0], f[1]
		if _, err := parseTime(v, now); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s %q: want a duration back from now (1h, 30m) or an RFC 3339 time (2026-12-06T18:00:00Z)", ErrInvalidOptions, flag, v))
		}
	}
	switch o.Output {
	case "", "json", "yaml":
	default:
		errs = append(errs, fmt.Errorf("%w: --output %q: want json or yaml (or none for a table)", ErrInvalidOptions, o.Output))
	}
	if o.ChunkSize <= 0 {
		errs = append(errs, fmt.Errorf("%w: --chunk-size %d: want a positive number", ErrInvalidOptions, o.ChunkSize))
	}
	if o.AllNamespaces && o.Namespace != "" {
		errs = append(errs, fmt.Errorf("%w: -n %q and --all-namespaces: choose one", ErrInvalidOptions, o.Namespace))
	}
	return errs
}

// parseTime reads --since/--until: empty is no bound.
func parseTime(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("negative duration")
		}
		return now.Add(-d), nil
	}
	return time.Parse(time.RFC3339Nano, strings.TrimSpace(v))
}

// rfc3339 is a bound as the API takes it (empty for none).
func rfc3339(v string, now time.Time) string {
	t, err := parseTime(v, now)
	if err != nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
