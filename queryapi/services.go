package queryapi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Reader is what the query API needs from a backend.
type Reader interface {
	Get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name, cluster string) (query.Object, error)
	List(ctx context.Context, o query.ListOptions) (query.Page, error)
}

type queryService struct {
	fleetviewv1.UnimplementedQueryServiceServer
	reader Reader
}

func requestGVR(group, version, resource string) (schema.GroupVersionResource, error) {
	if group == stream.CoreGroupToken {
		group = ""
	}
	var missing []string
	if version == "" {
		missing = append(missing, "version")
	}
	if resource == "" {
		missing = append(missing, "resource")
	}
	if len(missing) > 0 {
		return schema.GroupVersionResource{}, fmt.Errorf("%w: %s required", query.ErrInvalid, strings.Join(missing, " and "))
	}
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}, nil
}

func toStruct(b []byte) (*structpb.Struct, error) {
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("stored object is not a JSON object: %w", err)
	}
	return s, nil
}

func (q *queryService) Get(ctx context.Context, req *fleetviewv1.GetRequest) (*fleetviewv1.GetResponse, error) {
	gvr, err := requestGVR(req.GetGroup(), req.GetVersion(), req.GetResource())
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetName() == "" {
		return nil, toStatus(fmt.Errorf("%w: name required", query.ErrInvalid))
	}
	obj, err := q.reader.Get(ctx, gvr, req.GetNamespace(), req.GetName(), req.GetCluster())
	if err != nil {
		return nil, toStatus(err)
	}
	s, err := toStruct(obj.JSON)
	if err != nil {
		return nil, toStatus(err)
	}
	return &fleetviewv1.GetResponse{Object: s, Cluster: obj.Cluster}, nil
}

func (q *queryService) List(ctx context.Context, req *fleetviewv1.ListRequest) (*fleetviewv1.ListResponse, error) {
	gvr, err := requestGVR(req.GetGroup(), req.GetVersion(), req.GetResource())
	if err != nil {
		return nil, toStatus(err)
	}
	sel, err := labels.Parse(req.GetLabelSelector())
	if err != nil {
		return nil, toStatus(fmt.Errorf("%w: labelSelector: %v", query.ErrInvalid, err))
	}
	if req.GetLimit() < 0 {
		return nil, toStatus(fmt.Errorf("%w: limit must not be negative", query.ErrInvalid))
	}
	page, err := q.reader.List(ctx, query.ListOptions{
		GVR: gvr, Namespace: req.GetNamespace(), Labels: sel, Clusters: req.GetClusters(),
		Limit: req.GetLimit(), Continue: req.GetContinue(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &fleetviewv1.ListResponse{ResourceVersion: page.ResourceVersion, Continue: page.Continue, Items: make([]*structpb.Struct, 0, len(page.Items))}
	for _, it := range page.Items {
		s, err := toStruct(it.JSON)
		if err != nil {
			return nil, toStatus(err)
		}
		resp.Items = append(resp.Items, s)
	}
	return resp, nil
}

type clusterService struct {
	fleetviewv1.UnimplementedClusterServiceServer
	kv      jetstream.KeyValue
	js      jetstream.JetStream
	applied func() map[string]uint64
}

func (c *clusterService) toProto(ctx context.Context, rec *inventory.Cluster) *fleetviewv1.Cluster {
	out := &fleetviewv1.Cluster{
		Name: rec.Name, Labels: rec.Labels, Provider: rec.Provider, Region: rec.Region, Zone: rec.Zone,
		KubernetesVersion: rec.KubernetesVersion, Ready: rec.Ready, Message: rec.Message,
		LastHeartbeat: timestamppb.New(rec.Heartbeat),
	}
	for _, r := range rec.Resources {
		out.Resources = append(out.Resources, &fleetviewv1.ResourceSyncState{
			Gvr:  &fleetviewv1.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource},
			Kind: r.Kind, Namespaces: r.Namespaces, Synced: r.Synced, ObjectCount: r.ObjectCount, Message: r.Message,
		})
	}
	if st, err := c.js.Stream(ctx, stream.StreamName(rec.Name)); err == nil {
		if info, err := st.Info(ctx); err == nil {
			out.StreamSequence = info.State.LastSeq
		}
	}
	if c.applied != nil {
		out.AppliedSequence = c.applied()[rec.Name]
	}
	return out
}

func (c *clusterService) ListClusters(ctx context.Context, _ *fleetviewv1.ListClustersRequest) (*fleetviewv1.ListClustersResponse, error) {
	recs, err := inventory.List(ctx, c.kv)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &fleetviewv1.ListClustersResponse{}
	for _, r := range recs {
		resp.Clusters = append(resp.Clusters, c.toProto(ctx, r))
	}
	return resp, nil
}

func (c *clusterService) GetCluster(ctx context.Context, req *fleetviewv1.GetClusterRequest) (*fleetviewv1.Cluster, error) {
	rec, err := inventory.Get(ctx, c.kv, req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return c.toProto(ctx, rec), nil
}

type registryService struct {
	fleetviewv1.UnimplementedRegistryServiceServer
	store *regstore.Store
}

func registryProto(r *registry.ResourceRegistry) (*fleetviewv1.Registry, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	s, err := toStruct(b)
	if err != nil {
		return nil, err
	}
	return &fleetviewv1.Registry{Registry: s}, nil
}

func (s *registryService) ApplyRegistry(ctx context.Context, req *fleetviewv1.ApplyRegistryRequest) (*fleetviewv1.Registry, error) {
	if req.GetRegistry() == nil {
		return nil, toStatus(fmt.Errorf("%w: registry: required", registry.ErrInvalid))
	}
	b, err := protojson.Marshal(req.GetRegistry())
	if err != nil {
		return nil, toStatus(err)
	}
	r, err := registry.Decode(b)
	if err != nil {
		return nil, toStatus(err)
	}
	stored, err := s.store.Apply(ctx, r)
	if err != nil {
		return nil, toStatus(err)
	}
	out, err := registryProto(stored)
	return out, toStatus(err)
}

func (s *registryService) GetRegistry(ctx context.Context, req *fleetviewv1.GetRegistryRequest) (*fleetviewv1.Registry, error) {
	r, err := s.store.Get(ctx, req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	out, err := registryProto(r)
	return out, toStatus(err)
}

func (s *registryService) ListRegistries(ctx context.Context, _ *fleetviewv1.ListRegistriesRequest) (*fleetviewv1.ListRegistriesResponse, error) {
	rs, err := s.store.List(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &fleetviewv1.ListRegistriesResponse{}
	for _, r := range rs {
		p, err := registryProto(r)
		if err != nil {
			return nil, toStatus(err)
		}
		resp.Registries = append(resp.Registries, p)
	}
	return resp, nil
}

func (s *registryService) DeleteRegistry(ctx context.Context, req *fleetviewv1.DeleteRegistryRequest) (*fleetviewv1.DeleteRegistryResponse, error) {
	if err := s.store.Delete(ctx, req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &fleetviewv1.DeleteRegistryResponse{}, nil
}
