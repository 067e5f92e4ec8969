package queryapi

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
)

type registryService struct {
	fleetviewv1.UnimplementedRegistryServiceServer
	store    *regstore.Store
	backends BackendHealth
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
		return nil, apierr.ToStatus(fmt.Errorf("%w: registry: required", registry.ErrInvalid))
	}
	b, err := protojson.Marshal(req.GetRegistry())
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	r, err := registry.Decode(b)
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	stored, err := s.store.Apply(ctx, r)
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	out, err := registryProto(stored)
	return out, apierr.ToStatus(err)
}

func (s *registryService) GetRegistry(ctx context.Context, req *fleetviewv1.GetRegistryRequest) (*fleetviewv1.Registry, error) {
	r, err := s.store.Get(ctx, req.GetName())
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	withBackendCondition(r, s.backends, problems(s.backends))
	out, err := registryProto(r)
	return out, apierr.ToStatus(err)
}

func (s *registryService) ListRegistries(ctx context.Context, _ *fleetviewv1.ListRegistriesRequest) (*fleetviewv1.ListRegistriesResponse, error) {
	rs, err := s.store.List(ctx)
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	resp := &fleetviewv1.ListRegistriesResponse{}
	ps := problems(s.backends)
	for _, r := range rs {
		withBackendCondition(r, s.backends, ps)
		p, err := registryProto(r)
		if err != nil {
			return nil, apierr.ToStatus(err)
		}
		resp.Registries = append(resp.Registries, p)
	}
	return resp, nil
}

func (s *registryService) DeleteRegistry(ctx context.Context, req *fleetviewv1.DeleteRegistryRequest) (*fleetviewv1.DeleteRegistryResponse, error) {
	if err := s.store.Delete(ctx, req.GetName()); err != nil {
		return nil, apierr.ToStatus(err)
	}
	return &fleetviewv1.DeleteRegistryResponse{}, nil
}
