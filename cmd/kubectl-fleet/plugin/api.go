package plugin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleetview/fleetview/internal/hubclient"
)

// Entry is one change or revision as the REST API answers it
// (fleetview.v1.HistoryEntry in proto JSON, object and patch as JSON).
type Entry struct {
	Cluster         string            `json:"cluster"`
	Group           string            `json:"group,omitempty"`
	Version         string            `json:"version"`
	Resource        string            `json:"resource"`
	Kind            string            `json:"kind,omitempty"`
	Namespace       string            `json:"namespace,omitempty"`
	Name            string            `json:"name"`
	UID             string            `json:"uid"`
	Seq             Seq               `json:"seq"`
	Time            time.Time         `json:"time"`
	Type            string            `json:"type"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Manager         string            `json:"manager,omitempty"`
	Operation       string            `json:"operation,omitempty"`
	Subresource     string            `json:"subresource,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Object          json.RawMessage   `json:"object,omitempty"`
	Patch           json.RawMessage   `json:"patch,omitempty"`
	// RawObject and RawPatch are the proto's bytes fields, which proto
	// JSON spells in base64: read when object and patch are absent.
	RawObject []byte `json:"rawObject,omitempty"`
	RawPatch  []byte `json:"rawPatch,omitempty"`
}

// Seq is a uint64, which proto JSON writes as a string.
type Seq uint64

// UnmarshalJSON takes "12" and 12.
func (s *Seq) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseUint(strings.Trim(string(b), `"`), 10, 64)
	if err != nil {
		return fmt.Errorf("seq %s: %w", b, err)
	}
	*s = Seq(v)
	return nil
}

// normalize fills object and patch from their bytes fields and drops
// JSON nulls, so the rest reads one spelling.
func (e *Entry) normalize() {
	if isNull(e.Object) && len(e.RawObject) > 0 {
		e.Object = json.RawMessage(e.RawObject)
	}
	if isNull(e.Patch) && len(e.RawPatch) > 0 {
		e.Patch = json.RawMessage(e.RawPatch)
	}
	e.Object, e.Patch = unquote(e.Object), unquote(e.Patch)
	e.RawObject, e.RawPatch = nil, nil
}

func isNull(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || string(b) == "null"
}

// unquote reads a JSON string holding JSON (plain or base64) as that
// JSON; anything else is kept.
func unquote(b json.RawMessage) json.RawMessage {
	if isNull(b) {
		return nil
	}
	var s string
	if b[0] != '"' || json.Unmarshal(b, &s) != nil {
		return b
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	if d, err := base64.StdEncoding.DecodeString(s); err == nil && json.Valid(d) {
		return d
	}
	return b
}

// GR is the resource as kubectl names it: resource[.group].
func (e *Entry) GR() string {
	if e.Group == "" || e.Group == "core" {
		return e.Resource
	}
	return e.Resource + "." + e.Group
}

// session is one command's connection to the hub.
type session struct {
	hub *hubclient.Client
	// mapper resolves resource names with the hub's discovery.
	mapper meta.RESTMapper
	// namespace is the context's namespace ("default" when it names none).
	namespace string
}

func connect(o *Options) (*session, error) {
	rc, err := o.Kube.RESTConfig()
	if err != nil {
		return nil, err
	}
	hub, err := hubclient.New(rc)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", hubclient.ErrInvalidConfig, err)
	}
	cached := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, nil)
	ns := "default"
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kube.Kubeconfig
	if n, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Kube.Context}).Namespace(); err == nil && n != "" {
		ns = n
	}
	return &session{hub: hub, mapper: mapper, namespace: ns}, nil
}

// resource is a resolved resource argument.
type resource struct {
	gvr        schema.GroupVersionResource
	namespaced bool
}

// groupResource is the resource[.group] the change feed takes.
func (r resource) groupResource() string {
	if r.gvr.Group == "" {
		return r.gvr.Resource
	}
	return r.gvr.Resource + "." + r.gvr.Group
}

// resolve reads a resource argument as kubectl does (pods, po, pod,
// deploy, deployments.apps, deployments.v1.apps) from the hub's discovery,
// which lists what its registries cache.
func (s *session) resolve(arg string) (resource, error) {
	var gvr schema.GroupVersionResource
	var err error
	if full, gr := schema.ParseResourceArg(strings.ToLower(arg)); full != nil {
		gvr, err = s.mapper.ResourceFor(*full)
		if err != nil {
			gvr, err = s.mapper.ResourceFor(gr.WithVersion(""))
		}
	} else {
		gvr, err = s.mapper.ResourceFor(gr.WithVersion(""))
	}
	if err != nil {
		return resource{}, fmt.Errorf("%w: resource %q: the hub serves no such resource (`kubectl api-resources` lists what its registries cache): %v", ErrInvalidOptions, arg, err)
	}
	r := resource{gvr: gvr, namespaced: true}
	if gvk, err := s.mapper.KindFor(gvr); err == nil {
		if m, err := s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
			r.namespaced = m.Scope.Name() == meta.RESTScopeNameNamespace
		}
	}
	return r, nil
}

// changes reads every page of the change feed, handing each to fn as it
// arrives.
func (s *session) changes(ctx context.Context, q url.Values, chunk int64, fn func([]Entry) error) error {
	return s.eachPage(ctx, "/v1/changes", q, chunk, func(b *page) []Entry { return b.Changes }, fn)
}

// revisions reads every page of one object's revisions.
func (s *session) revisions(ctx context.Context, r resource, name string, q url.Values, chunk int64) ([]Entry, error) {
	group := r.gvr.Group
	if group == "" {
		group = "core"
	}
	path := "/v1/revisions/" + url.PathEscape(group) + "/" + url.PathEscape(r.gvr.Version) + "/" + url.PathEscape(r.gvr.Resource) + "/" + url.PathEscape(name)
	// One object's revisions within the window: held at once, as diff
	// numbers and picks them.
	var all []Entry
	err := s.eachPage(ctx, path, q, chunk, func(b *page) []Entry { return b.Revisions }, func(es []Entry) error {
		all = append(all, es...)
		return nil
	})
	return all, err
}

type page struct {
	Changes   []Entry `json:"changes"`
	Revisions []Entry `json:"revisions"`
	Continue  string  `json:"continue"`
}

// maxPages stops a feed whose continue token never ends (a hub bug)
// instead of looping forever.
const maxPages = 100000

func (s *session) eachPage(ctx context.Context, path string, q url.Values, chunk int64, of func(*page) []Entry, fn func([]Entry) error) error {
	q.Set("limit", strconv.FormatInt(chunk, 10))
	for range maxPages {
		var p page
		if err := s.hub.Get(ctx, path, q, &p); err != nil {
			return err
		}
		es := of(&p)
		for i := range es {
			es[i].normalize()
		}
		if err := fn(es); err != nil {
			return err
		}
		if p.Continue == "" {
			return nil
		}
		if p.Continue == q.Get("continue") {
			return fmt.Errorf("GET %s: the hub answered the same continue token twice", path)
		}
		q.Set("continue", p.Continue)
	}
	return fmt.Errorf("GET %s: more than %d pages", path, maxPages)
}
