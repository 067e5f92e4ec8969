package authz

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/kubepath"
	"github.com/fleetview/fleetview/internal/memberrbac"
	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
)

// Guard authenticates and authorizes every call before a service sees it.
// It sits in gRPC interceptors; the REST gateway reaches the services through
// gRPC, so both paths are guarded by the same code. The Authorization header
// of a REST call arrives as gRPC metadata.
type Guard struct {
	Tokens     *auth.TokenAuthenticator // nil: bearer tokens not accepted
	Authorizer *auth.Authorizer
	// Mode says what decides reads of cached objects ("" is ModePolicy).
	Mode AuthorizationMode
	// Members are the member clusters' RBAC authorizers (ModeMemberRBAC,
	// ModeBoth), kept by the server's follower (Config.MemberRBAC).
	Members *memberrbac.Members
	// served lists the resources the hub serves (the catalog's), for a
	// search under member RBAC that names none; set by UseCatalog.
	served func() []schema.GroupResource
	// clusterScoped reports a served resource the catalog knows as
	// cluster-scoped (false when unknown); set by UseCatalog.
	clusterScoped func(schema.GroupResource) bool
}

// Calls anyone may make: they reveal no cached data.
var openMethods = []string{
	"/grpc.health.v1.Health/Check",
	"/grpc.health.v1.Health/Watch",
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
}

// OpenMethod reports a call anyone may make: the metrics leave it out too.
func OpenMethod(fullMethod string) bool { return slices.Contains(openMethods, fullMethod) }

// UseCatalog tells the Guard what the hub serves (the catalog's
// resources) and which of them are cluster-scoped; queryapi.New calls it.
func (g *Guard) UseCatalog(served func() []schema.GroupResource, clusterScoped func(schema.GroupResource) bool) {
	g.served, g.clusterScoped = served, clusterScoped
}

func (g *Guard) identify(ctx context.Context) (auth.User, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for _, v := range md.Get("authorization") {
			tok, found := strings.CutPrefix(v, "Bearer ")
			if !found || g.Tokens == nil {
				continue
			}
			return g.Tokens.Authenticate(strings.TrimSpace(tok))
		}
	}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0 {
			return auth.UserFromCertificate(ti.State.VerifiedChains[0][0]), nil
		}
	}
	return auth.User{}, fmt.Errorf("%w: send a bearer token (Authorization: Bearer ...) or a client certificate", auth.ErrUnauthenticated)
}

// resourceRequest is what Get, List, Watch and similar requests share.
type resourceRequest interface {
	GetGroup() string
	GetResource() string
	GetNamespace() string
}

type clusterRequest interface{ GetCluster() string }

type clustersRequest interface{ GetClusters() []string }

func resourceName(r resourceRequest) string {
	g := kubepath.GroupFromName(r.GetGroup())
	return auth.Resource(g, r.GetResource())
}

// VerbFor names what a method does; unknown methods need the registry
// administration verb, the one a "*" rule never grants.
func VerbFor(method string) (verb, resource string) {
	name := method[strings.LastIndex(method, "/")+1:]
	switch {
	case strings.HasPrefix(method, "/fleetview.v1.ClusterService/"):
		return auth.VerbList, "clusters"
	case name == "GetRegistry" || name == "ListRegistries":
		return auth.VerbList, "registries"
	case strings.HasPrefix(method, "/fleetview.v1.RegistryService/"):
		return auth.VerbRegistryAdmin, "registries"
	case name == "Get" || name == "ListRevisions":
		// An object's revisions are read as the object is.
		return auth.VerbGet, ""
	case name == "ListChanges":
		// The change feed is a list of many resources (authzhistory.go).
		return auth.VerbList, ""
	case name == "List" || name == "Count":
		// A count reveals what the list would: authorized as one.
		return auth.VerbList, ""
	case strings.HasPrefix(name, "Watch"):
		return auth.VerbWatch, ""
	case strings.HasPrefix(name, "Search") || name == "Related":
		return auth.VerbSearch, ""
	}
	return auth.VerbRegistryAdmin, "*"
}

// admit authorizes a request and narrows it to the caller's scope. The
// returned scope filters what goes back (nil: nothing to filter).
func (g *Guard) admit(ctx context.Context, u auth.User, method string, req any) (*auth.Scope, error) {
	verb, res := VerbFor(method)
	if verb == auth.VerbSearch {
		// Search spans resources: Unary admits it (search) with the
		// caller's visibility over all of them, not one resource's scope.
		return nil, fmt.Errorf("%w: search is admitted by its own path", auth.ErrForbidden)
	}
	rr, ok := req.(resourceRequest)
	if res != "" || !ok {
		// The inventory and the registries are no member's objects: the
		// policy decides them in every mode.
		if res == "" {
			res = "*"
		}
		return nil, g.Authorizer.Authorize(u, verb, res, "", "")
	}
	scope, err := g.scopeOf(ctx, u, verb, rr, req)
	if err != nil {
		return nil, err
	}
	if scope == nil {
		return nil, nil
	}
	if allowed, all := scope.Clusters(); !all {
		if err := narrowClusters(req, allowed); err != nil {
			return nil, fmt.Errorf("%w: user %q may not %s %s in the requested clusters", auth.ErrForbidden, u.Name, verb, resourceName(rr))
		}
	}
	return scope, nil
}

// scopeOf is where u may make verb on the resource of rr (nil:
// everywhere): the policy's scope, the members', or what both allow, as
// the mode says; Forbidden when that is nowhere.
func (g *Guard) scopeOf(ctx context.Context, u auth.User, verb string, rr resourceRequest, req any) (*auth.Scope, error) {
	var scope *auth.Scope
	if g.policy() {
		s, err := g.policyScope(u, verb, rr, req)
		if err != nil {
			return nil, err
		}
		scope = s
	}
	if !g.members() {
		return scope, nil
	}
	ms, err := g.memberScope(ctx, u, verb, rr, req)
	if err != nil {
		return nil, err
	}
	if !g.policy() {
		return ms, nil
	}
	scope = intersectScopes(scope, ms)
	if scope != nil && scope.Empty() {
		return nil, fmt.Errorf("%w: user %q may not %s %s where both fleetview's policy and the member clusters' RBAC allow it", auth.ErrForbidden, u.Name, verb, resourceName(rr))
	}
	return scope, nil
}

// policyScope is the policy's answer to a resource request (nil:
// everywhere), or Forbidden.
func (g *Guard) policyScope(u auth.User, verb string, rr resourceRequest, req any) (*auth.Scope, error) {
	res := resourceName(rr)
	if cr, ok := req.(clusterRequest); ok && verb == auth.VerbGet {
		// A Get names its object; an unqualified one may resolve in any
		// cluster, so it needs every cluster or is narrowed to the
		// caller's scope (Unary hands the backend its visibility).
		if err := g.Authorizer.Authorize(u, verb, res, cr.GetCluster(), rr.GetNamespace()); err == nil {
			return nil, nil
		}
	}
	s := g.Authorizer.Scope(u, verb, res)
	if s.Empty() {
		return nil, g.Authorizer.Authorize(u, verb, res, "", rr.GetNamespace())
	}
	if s.Unrestricted() {
		return nil, nil
	}
	return &s, nil
}

// narrowClusters pushes a cluster restriction into a query: what the caller
// may not see is never read.
func narrowClusters(req any, allowed []string) error {
	var cl *[]string
	switch r := req.(type) {
	case *fleetviewv1.ListRequest:
		cl = &r.Clusters
	case *fleetviewv1.WatchRequest:
		cl = &r.Clusters
	case *fleetviewv1.SearchRequest:
		cl = &r.Clusters
	case *fleetviewv1.CountRequest:
		cl = &r.Clusters
	case *fleetviewv1.ListChangesRequest:
		cl = &r.Clusters
	default:
		return nil
	}
	if len(*cl) == 0 {
		*cl = slices.Clone(allowed)
		return nil
	}
	*cl = slices.DeleteFunc(*cl, func(c string) bool { return !slices.Contains(allowed, c) })
	if len(*cl) == 0 {
		return auth.ErrForbidden
	}
	return nil
}

type visibilityKey struct{}

// WithVisibility hands the caller's visibility to the list and search
// services, which pass it to the backend.
func WithVisibility(ctx context.Context, v *query.Visibility) context.Context {
	return context.WithValue(ctx, visibilityKey{}, v)
}

// VisibleFrom is the visibility the Guard admitted a list or search with;
// nil (everything) when no Guard runs, i.e. without authentication, or
// when the caller's rules see everything.
func VisibleFrom(ctx context.Context) *query.Visibility {
	v, _ := ctx.Value(visibilityKey{}).(*query.Visibility)
	return v
}

// visibility is what u may search, rule by rule, with the policy's
// resource names resolved: "deployments.apps" is the group apps, and a "*"
// never covers Secrets unless the rule names them too. nil: everything.
func (g *Guard) visibility(u auth.User) *query.Visibility {
	return g.visibilityFor(u, auth.VerbSearch)
}

// visibilityFor is visibility for the policy's grants of verb.
func (g *Guard) visibilityFor(u auth.User, verb string) *query.Visibility {
	secrets := schema.GroupResource{Resource: "secrets"}
	v := &query.Visibility{}
	for _, gr := range g.Authorizer.Grants(u, verb) {
		qg := query.Grant{Clusters: gr.Clusters, Namespaces: gr.Namespaces}
		named := make([]schema.GroupResource, 0, len(gr.Resources))
		for _, r := range gr.Resources {
			named = append(named, schema.ParseGroupResource(r))
		}
		switch {
		case !gr.AllResources:
			qg.Resources = named
		case !slices.Contains(named, secrets):
			qg.Except = []schema.GroupResource{secrets}
		}
		if qg.Resources == nil && qg.Except == nil && qg.Clusters == nil && qg.Namespaces == nil {
			return nil // one rule sees everything: nothing to filter
		}
		v.Grants = append(v.Grants, qg)
	}
	return v
}

// scopeVisibility is one resource's scope as a visibility (a list reads
// one resource, so the grants need not name it).
func scopeVisibility(s auth.Scope) *query.Visibility {
	v := &query.Visibility{}
	for _, p := range s.Pairs {
		v.Grants = append(v.Grants, query.Grant{Clusters: p.Clusters, Namespaces: p.Namespaces, Sorted: p.Sorted})
	}
	return v
}

// search admits a search: the caller's visibility goes into the query, so
// the backend skips hidden objects before the limit (a page of N hits is N
// visible objects, and a continue token never marks a hidden one's
// position), and the clusters nothing is visible in are never read.
func (g *Guard) search(ctx context.Context, u auth.User, req any, handler grpc.UnaryHandler) (any, error) {
	vis := g.visibility(u)
	if vis.None() {
		return nil, apierr.ToStatus(g.Authorizer.Authorize(u, auth.VerbSearch, "*", "", ""))
	}
	if allowed, all := vis.Clusters(); !all {
		if err := narrowClusters(req, allowed); err != nil {
			return nil, apierr.ToStatus(fmt.Errorf("%w: user %q may not search the requested clusters", auth.ErrForbidden, u.Name))
		}
	}
	resp, err := handler(WithVisibility(auth.WithUser(ctx, u), vis), req)
	if sr, ok := resp.(*fleetviewv1.SearchResponse); ok && err == nil {
		// The backend applied the visibility already; this keeps a
		// backend that ignored it from leaking.
		g.searchFilter(u, sr)
	}
	return resp, err
}

// searchFilter keeps the hits the caller may see, each judged against the
// scope of its own resource.
func (g *Guard) searchFilter(u auth.User, r *fleetviewv1.SearchResponse) {
	scopes := map[string]auth.Scope{}
	r.Items = slices.DeleteFunc(r.Items, func(h *fleetviewv1.SearchHit) bool {
		res := auth.Resource(h.GetGvr().GetGroup(), h.GetGvr().GetResource())
		sc, ok := scopes[res]
		if !ok {
			sc = g.Authorizer.Scope(u, auth.VerbSearch, res)
			scopes[res] = sc
		}
		_, ns := objectLocation(h.GetObject(), h.GetRawObject())
		return !sc.Allows(h.GetCluster(), ns)
	})
}

// Unary is the unary server interceptor.
func (g *Guard) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if slices.Contains(openMethods, info.FullMethod) {
		return handler(ctx, req)
	}
	u, err := g.identify(ctx)
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	noteUser(ctx, u)
	if info.FullMethod == fleetviewv1.QueryService_Related_FullMethodName {
		return g.related(ctx, u, req, handler)
	}
	if info.FullMethod == fleetviewv1.QueryService_ListChanges_FullMethodName {
		return g.changes(ctx, u, req, handler)
	}
	if verb, _ := VerbFor(info.FullMethod); verb == auth.VerbSearch {
		if g.members() {
			return g.memberSearch(ctx, u, req, handler)
		}
		return g.search(ctx, u, req, handler)
	}
	if info.FullMethod == fleetviewv1.ClusterService_ListClusters_FullMethodName &&
		g.Authorizer.Authorize(u, auth.VerbList, "clusters", "", "") != nil {
		return g.discoveryView(auth.WithUser(ctx, u), u, req, handler)
	}
	scope, err := g.admit(ctx, u, info.FullMethod, req)
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	ctx = g.relationVisibility(auth.WithUser(ctx, u), u, req)
	if scope != nil {
		switch req.(type) {
		case *fleetviewv1.ListRequest, *fleetviewv1.GetRequest, *fleetviewv1.CountRequest, *fleetviewv1.ListRevisionsRequest:
			// Namespaces too are applied by the backend. A list applies
			// them before the limit: pages stay full, and neither the
			// continue token nor the remaining count reflects hidden
			// objects. A Get reads only visible clusters: a hidden copy
			// neither answers nor makes it ambiguous (a 409 naming hidden
			// clusters), and a hidden object is not found exactly like a
			// missing one.
			ctx = WithVisibility(ctx, scopeVisibility(*scope))
		}
	}
	resp, err := handler(ctx, req)
	if err != nil || scope == nil {
		return resp, err
	}
	if err := filter(scope, resp); err != nil {
		// A backend that ignored the visibility: not found rather than
		// forbidden, in the words of a missing object, since existence
		// outside one's scope is itself information.
		return nil, apierr.ToStatus(hiddenObject(req))
	}
	return resp, nil
}

// hiddenObject is the answer to a Get of an object the caller may not see:
// a missing object's, word for word.
func hiddenObject(req any) error {
	r, _ := req.(*fleetviewv1.GetRequest)
	gvr, err := RequestGVR(r.GetGroup(), r.GetVersion(), r.GetResource())
	if err != nil {
		return err
	}
	return query.NotFoundError(gvr, r.GetName())
}

// Stream is the streaming server interceptor: the first request message is
// admitted like a unary request, and every message sent back is filtered.
func (g *Guard) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if slices.Contains(openMethods, info.FullMethod) {
		return handler(srv, ss)
	}
	u, err := g.identify(ss.Context())
	if err != nil {
		return apierr.ToStatus(err)
	}
	noteUser(ss.Context(), u)
	gs := &guardedStream{ServerStream: ss, g: g, u: u, method: info.FullMethod}
	defer gs.stopRevocation()
	return handler(srv, gs)
}

type guardedStream struct {
	grpc.ServerStream
	g        *Guard
	u        auth.User
	method   string
	admitted bool
	scope    *auth.Scope
	// revoke ends a watch whose access the members' RBAC took back
	// (authzrevoke.go); nil when none is watched for.
	revoke *revocation
}

func (s *guardedStream) Context() context.Context {
	base := s.ServerStream.Context()
	if s.revoke != nil {
		base = s.revoke.ctx
	}
	ctx := auth.WithUser(base, s.u)
	if s.scope != nil {
		// A watch applies the namespaces too, before it queues an event.
		ctx = WithVisibility(ctx, scopeVisibility(*s.scope))
	}
	return ctx
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if !s.admitted {
		// Taken before the decision: a change while it is made is
		// judged again at once.
		gen := s.g.watchedGeneration(s.method)
		asked := m
		if wr, ok := m.(*fleetviewv1.WatchRequest); ok && s.g.members() {
			// Judged again as asked: admit narrows the clusters, and a
			// fleet watch narrowed to one cluster is not a request under
			// /clusters/<member>/ (memberScope decides those alone).
			asked = proto.Clone(wr)
		}
		scope, err := s.g.admit(s.ServerStream.Context(), s.u, s.method, m)
		if err != nil {
			return apierr.ToStatus(err)
		}
		s.admitted, s.scope = true, scope
		s.startRevocation(gen, asked)
	}
	return nil
}

func (s *guardedStream) SendMsg(m any) error {
	if !s.admitted {
		return apierr.ToStatus(fmt.Errorf("%w: stream sent before its request was authorized", auth.ErrForbidden))
	}
	if err := s.revoked(); err != nil {
		return err
	}
	if s.scope != nil {
		if err := filter(s.scope, m); err != nil {
			return nil // an event outside the scope is not delivered
		}
	}
	return s.ServerStream.SendMsg(m)
}

// RequestGVR is the resource a request names, the core group's token
// read as "", or ErrInvalid naming what is missing.
func RequestGVR(group, version, resource string) (schema.GroupVersionResource, error) {
	group = kubepath.GroupFromName(group)
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
