package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleetview/fleetview/collector"
	"github.com/fleetview/fleetview/internal/stream"
)

// CollectorOptions run one collector against a NATS server.
type CollectorOptions struct {
	Cluster    string
	Kubeconfig string
	Context    string
	NATSURL    string
	Labels     map[string]string
	Provider   string
	Region     string
	Zone       string
	Heartbeat  time.Duration
}

// AddFlags registers the flags.
func (o *CollectorOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Cluster, "cluster", "", "name of the member cluster (a DNS label)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig of the member cluster (empty: in-cluster config)")
	fs.StringVar(&o.Context, "context", "", "kubeconfig context")
	fs.StringVar(&o.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	fs.StringToStringVar(&o.Labels, "labels", nil, "cluster labels for ClusterAffinity (k=v,...)")
	fs.StringVar(&o.Provider, "provider", "", "cluster provider (ClusterAffinity fieldSelector)")
	fs.StringVar(&o.Region, "region", "", "cluster region (ClusterAffinity fieldSelector)")
	fs.StringVar(&o.Zone, "zone", "", "cluster zone (ClusterAffinity fieldSelector)")
	fs.DurationVar(&o.Heartbeat, "heartbeat", 10*time.Second, "inventory heartbeat interval")
}

// Validate reports every problem at once.
func (o *CollectorOptions) Validate() []error {
	var errs []error
	if o.Cluster == "" {
		errs = append(errs, fmt.Errorf("%w: --cluster is required", ErrInvalidOptions))
	} else if err := stream.ValidateCluster(o.Cluster); err != nil {
		errs = append(errs, fmt.Errorf("%w: --cluster: %v", ErrInvalidOptions, err))
	}
	for k, v := range o.Labels {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%w: --labels key %q: %s", ErrInvalidOptions, k, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%w: --labels value %q: %s", ErrInvalidOptions, v, strings.Join(msgs, "; ")))
		}
	}
	if o.Heartbeat <= 0 {
		errs = append(errs, fmt.Errorf("%w: --heartbeat must be positive", ErrInvalidOptions))
	}
	return errs
}

// RunCollector runs one collector until ctx ends, then closes NATS.
func RunCollector(ctx context.Context, o CollectorOptions, log *slog.Logger) error {
	if errs := o.Validate(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	rc, err := restConfig(o.Kubeconfig, o.Context)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(o.NATSURL, nats.Name("fleetview-collector-"+o.Cluster), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect to NATS %s: %w", o.NATSURL, err)
	}
	defer nc.Close()
	col, err := collector.New(collector.Config{
		Cluster: o.Cluster, REST: rc, NATS: nc, Labels: o.Labels, Provider: o.Provider, Region: o.Region, Zone: o.Zone,
		HeartbeatInterval: o.Heartbeat, Logger: log,
	})
	if err != nil {
		return err
	}
	return col.Run(ctx)
}
