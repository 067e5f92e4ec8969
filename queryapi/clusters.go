package queryapi

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/registry"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
	"github.com/fleetview/fleetview/queryapi/catalog"
)

type clusterService struct {
	fleetviewv1.UnimplementedClusterServiceServer
	kv   jetstream.KeyValue
	js   jetstream.JetStream
	sync *syncChecker
}

// clusterView is what toProto reads for every cluster of one answer,
// read once for the answer rather than once per cluster (the applied
// sequences alone are a map of every cluster: copied per cluster, a list
// of 2,000 clusters copied 4 million entries).
type clusterView struct {
	regs    []*registry.ResourceRegistry
	regsErr error
	applied map[string]uint64
	// lastSeq is each cluster stream's last sequence, from one stream
	// listing; nil: ask for the one stream.
	lastSeq map[string]uint64
}

// view reads a clusterView; all lists every stream's last sequence too.
// What it cannot read leaves the clusters' figures unknown, as a failed
// read per cluster did: the sync unknown (not synced), a sequence asked
// per cluster.
func (c *clusterService) view(ctx context.Context, all bool) clusterView {
	var v clusterView
	v.regs, v.regsErr = c.sync.registries(ctx)
	if c.sync.applied != nil {
		v.applied = c.sync.applied()
	}
	if all {
		v.lastSeq = c.sync.streamEnds(ctx)
	}
	return v
}

func (c *clusterService) toProto(ctx context.Context, rec *inventory.Cluster, v clusterView) *fleetviewv1.Cluster {
	out := &fleetviewv1.Cluster{
		Name: rec.Name, Labels: rec.Labels, Provider: rec.Provider, Region: rec.Region, Zone: rec.Zone,
		KubernetesVersion: rec.KubernetesVersion, Ready: rec.Ready, Message: rec.Message,
		LastHeartbeat: timestamppb.New(rec.Heartbeat), ServedApis: rec.ServedAPIs,
		Authorization: rec.Authorization,
	}
	b := c.sync.backends
	ps := problems(b)
	backendDown, marked := false, false
	var snap *catalog.Snapshot
	if c.sync.catalog != nil {
		snap = c.sync.catalog.Current()
	}
	for _, r := range rec.Resources {
		rs := &fleetviewv1.ResourceSyncState{
			Gvr:  &fleetviewv1.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource},
			Kind: r.Kind, Namespaces: r.Namespaces, Synced: r.Synced, ObjectCount: r.ObjectCount, Message: r.Message,
			RefusedObjects: r.RefusedObjects, SecretData: r.SecretData, Namespaced: r.Namespaced,
			ShortNames: r.ShortNames, Categories: r.Categories,
		}
		if snap != nil {
			if why := snap.Mark(rec.Name, schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}); why != "" {
				// What the record says is shown, and why the hub does not
				// believe it.
				rs.Message, marked = "not followed: "+why, true
			}
		}
		if b != nil {
			var id string
			id, rs.Backend = b.BackendOf(rec.Name, schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource})
			if p, ok := ps[id]; ok {
				rs.BackendError, backendDown = problemText(p), true
			}
		}
		out.Resources = append(out.Resources, rs)
		out.ObjectCount += r.ObjectCount
	}
	if v.lastSeq != nil {
		out.StreamSequence = v.lastSeq[rec.Name]
	} else if st, err := c.js.Stream(ctx, stream.StreamName(rec.Name)); err == nil {
		out.StreamSequence = st.CachedInfo().State.LastSeq
	}
	out.AppliedSequence = v.applied[rec.Name]
	if out.StreamSequence > out.AppliedSequence {
		out.Lag = out.StreamSequence - out.AppliedSequence
	}
	if ok, _, err := c.sync.clusterSynced(ctx, v.regs, rec, v.applied, v.lastSeq); err == nil && v.regsErr == nil {
		out.CacheSynced = ok && !backendDown && !marked
	}
	return out
}

func (c *clusterService) ListClusters(ctx context.Context, _ *fleetviewv1.ListClustersRequest) (*fleetviewv1.ListClustersResponse, error) {
	recs, err := clusterRecords(ctx, c.sync.catalog, c.kv)
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	v := c.view(ctx, true)
	resp := &fleetviewv1.ListClustersResponse{}
	for _, r := range recs {
		resp.Clusters = append(resp.Clusters, c.toProto(ctx, r, v))
	}
	return resp, nil
}

func (c *clusterService) GetCluster(ctx context.Context, req *fleetviewv1.GetClusterRequest) (*fleetviewv1.Cluster, error) {
	rec, err := inventory.Get(ctx, c.kv, req.GetName())
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	return c.toProto(ctx, rec, c.view(ctx, false)), nil
}

// clusterRecords is every cluster's inventory record, sorted by name:
// the catalog's once it is loaded, since it follows the inventory (a read
// per cluster per request would cost a fleet of 2,000 clusters 2,000 NATS
// round trips), else read from the bucket.
func clusterRecords(ctx context.Context, cat *catalog.Catalog, kv jetstream.KeyValue) ([]*inventory.Cluster, error) {
	if cat != nil && cat.Loaded() {
		return cat.Current().Records(), nil
	}
	return inventory.List(ctx, kv)
}
