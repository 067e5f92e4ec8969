package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/registry"
	"github.com/fleetview/fleetview/internal/stream"
)

// Cluster is one member cluster as its collector last described it.
type Cluster struct {
	Name              string            `json:"name"`
	Labels            map[string]string `json:"labels,omitempty"`
	Provider          string            `json:"provider,omitempty"`
	Region            string            `json:"region,omitempty"`
	Zone              string            `json:"zone,omitempty"`
	KubernetesVersion string            `json:"kubernetesVersion,omitempty"`
	// ServedAPIs are the group/versions the cluster serves ("v1" for core).
	ServedAPIs []string        `json:"servedAPIs,omitempty"`
	Ready      bool            `json:"ready"`
	Message    string          `json:"message,omitempty"`
	Heartbeat  time.Time       `json:"heartbeat"`
	Resources  []ResourceState `json:"resources,omitempty"`
	// Registries are the generation of each registry selecting the
	// cluster that Resources answer: the hub cannot tell from a
	// wildcard's spec which kinds it stands for, so it waits for the
	// collector to say it reconciled that generation.
	Registries map[string]int64 `json:"registries,omitempty"`
	// Counters are the collector's counters since it started.
	Counters *Counters `json:"counters,omitempty"`
	// HubRefusals are the collector's requests the hub refused since it
	// started because the cluster held its per-cluster quota of a shared
	// resource; nil for none. A record over its own size quota is refused
	// too, so this shows every refusal but that one.
	HubRefusals *HubRefusals `json:"hubRefusals,omitempty"`
	// Authorization is what the member's authorizers let fleetview know
	// of its decisions, as the collector's SelfSubjectRulesReview last
	// found it: AuthorizationRBAC, AuthorizationRBACAndOthers, or empty
	// when the collector could not ask (an older collector, a review
	// refused). Member RBAC mirrors RBAC only, so this says whether the
	// member may allow more than fleetview shows.
	Authorization string `json:"authorization,omitempty"`
}

// Values of Cluster.Authorization.
const (
	// AuthorizationRBAC: every authorizer of the member listed its rules
	// for the collector (status.incomplete false): RBAC, and the Node
	// authorizer, which decides only for system:node identities.
	AuthorizationRBAC = "rbac"
	// AuthorizationRBACAndOthers: an authorizer of the member could not
	// list its rules (status.incomplete true: a webhook). RBAC is
	// mirrored, the other authorizers are not: the member may allow a
	// user more than fleetview shows, never less.
	AuthorizationRBACAndOthers = "rbac-and-others"
)

// HubRefusals are a collector's requests the hub refused over the cluster's
// quota: how many, and the last one's error and time.
type HubRefusals struct {
	Count    int64     `json:"count"`
	Last     string    `json:"last"`
	LastTime time.Time `json:"lastTime"`
}

// Counters are what a collector published since it started.
type Counters struct {
	Upserts       int64 `json:"upserts"`
	Tombstones    int64 `json:"tombstones"`
	Unchanged     int64 `json:"unchanged"`
	Refused       int64 `json:"refused"`
	PublishErrors int64 `json:"publishErrors"`
	Relists       int64 `json:"relists"`
}

// ResourceState is the sync state of one cached resource in a cluster.
type ResourceState struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
	Kind     string `json:"kind"`
	// Namespaced is the resource's scope in the member cluster, for the
	// Kubernetes discovery documents the query API serves.
	Namespaced bool `json:"namespaced,omitempty"`
	// ShortNames and Categories are what the member cluster's discovery
	// reports for the resource (metav1.APIResource), in its order, so the
	// query API's discovery offers the member's short names and categories.
	ShortNames  []string `json:"shortNames,omitempty"`
	Categories  []string `json:"categories,omitempty"`
	Namespaces  []string `json:"namespaces,omitempty"`
	Synced      bool     `json:"synced"`
	ObjectCount int64    `json:"objectCount"`
	// SecretData is true when Secret data is cached (opted in).
	SecretData bool `json:"secretData,omitempty"`
	// RefusedObjects counts objects refused as too large for NATS.
	RefusedObjects int64 `json:"refusedObjects,omitempty"`
	// Message says why the resource is not cached (e.g. not served) or what
	// went wrong last.
	Message string `json:"message,omitempty"`
	// Columns are the resource's Table columns as the member cluster
	// prints them (its own printers, a CRD's printer columns), in the
	// order of the cells stored with each object; none when the member
	// served no Table.
	Columns []Column `json:"columns,omitempty"`
}

// Column is one column of a resource's Table (metav1.TableColumnDefinition,
// its description cut to MaxColumnDescription bytes).
type Column struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Format      string `json:"format,omitempty"`
	Description string `json:"description,omitempty"`
	Priority    int32  `json:"priority,omitempty"`
}

// Bounds of a resource's columns in a record. kubectl prints names and
// never descriptions; a member's are up to ~300 bytes (a Pod's Name), which
// the collector cuts, so a record past these bounds is not a collector's.
const (
	MaxColumnName        = 128
	MaxColumnType        = 32
	MaxColumnDescription = 256
)

// validColumns checks a resource's columns against the bounds above and
// stream.MaxColumns (the most cells an event may carry).
func validColumns(cols []Column) error {
	if len(cols) > stream.MaxColumns {
		return fmt.Errorf("%d columns, more than %d", len(cols), stream.MaxColumns)
	}
	for i, c := range cols {
		switch {
		case c.Name == "" || len(c.Name) > MaxColumnName:
			return fmt.Errorf("column %d: name of %d bytes (1 to %d)", i, len(c.Name), MaxColumnName)
		case len(c.Type) > MaxColumnType || len(c.Format) > MaxColumnType:
			return fmt.Errorf("column %q: type or format longer than %d bytes", c.Name, MaxColumnType)
		case len(c.Description) > MaxColumnDescription:
			return fmt.Errorf("column %q: description of %d bytes, more than %d", c.Name, len(c.Description), MaxColumnDescription)
		}
	}
	return nil
}

// Info is what ClusterAffinity is evaluated against.
func (c *Cluster) Info() registry.ClusterInfo {
	return registry.ClusterInfo{Name: c.Name, Labels: c.Labels, Provider: c.Provider, Region: c.Region, Zone: c.Zone}
}

// Bucket opens (creating or updating if needed) the inventory KV bucket
// with replicas copies (natsnames.ValidateReplicas).
func Bucket(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := natsnames.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      natsnames.ClusterBucket,
		Description: "fleetview cluster inventory",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, err
	}
	return kv, nil
}

// Put writes a cluster record.
func Put(ctx context.Context, kv jetstream.KeyValue, c *Cluster) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, c.Name, b); err != nil {
		return fmt.Errorf("write inventory of %s: %w", c.Name, err)
	}
	return nil
}

// Get reads one cluster record.
func Get(ctx context.Context, kv jetstream.KeyValue, name string) (*Cluster, error) {
	e, err := kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, err
	}
	return decode(name, e.Value())
}

// List reads every cluster record, sorted by name.
func List(ctx context.Context, kv jetstream.KeyValue) ([]*Cluster, error) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Cluster
	for k := range lister.Keys() {
		c, err := Get(ctx, kv, k)
		if errors.Is(err, ErrNotFound) {
			continue // deleted between listing and reading
		}
		if errors.Is(err, ErrCorrupt) {
			// Written by that cluster's collector: a bad record must
			// not hide the others, nor be taken for any cluster.
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// decode reads the record stored under key and validates it again: the
// routes (ClusterAffinity), the query API's discovery and its cluster list
// act on it, and its writer is a member cluster's collector.
func decode(key string, b []byte) (*Cluster, error) {
	c := &Cluster{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
	}
	if c.Name != key {
		return nil, fmt.Errorf("%w: key %s holds cluster %q", ErrCorrupt, key, c.Name)
	}
	if msgs := registry.ValidateClusterName(c.Name); len(msgs) > 0 {
		return nil, fmt.Errorf("%w: cluster name %q: %s", ErrCorrupt, c.Name, strings.Join(msgs, "; "))
	}
	if errs := metav1validation.ValidateLabels(c.Labels, field.NewPath("labels")); len(errs) > 0 {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, key, errs.ToAggregate())
	}
	switch c.Authorization {
	case "", AuthorizationRBAC, AuthorizationRBACAndOthers:
	default:
		return nil, fmt.Errorf("%w: %s: authorization %.64q: want %q, %q or none", ErrCorrupt, key, c.Authorization, AuthorizationRBAC, AuthorizationRBACAndOthers)
	}
	for _, r := range c.Resources {
		if err := validColumns(r.Columns); err != nil {
			return nil, fmt.Errorf("%w: %s: resources %s/%s/%s: %v", ErrCorrupt, key, r.Group, r.Version, r.Resource, err)
		}
	}
	return c, nil
}

// Decode reads the record stored under key and validates it as Get does:
// for readers that follow the bucket with a watch rather than reading
// each key.
func Decode(key string, b []byte) (*Cluster, error) { return decode(key, b) }
