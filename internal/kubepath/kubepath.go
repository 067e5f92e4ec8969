package kubepath

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is what a path addresses.
type Kind string

const (
	// KindResource is a resource, an object or one of its subresources.
	KindResource Kind = "resource"
	// KindDiscovery is /api, /api/{version}, /apis, /apis/{group} or
	// /apis/{group}/{version}.
	KindDiscovery Kind = "discovery"
	// KindOpenAPI is /openapi/v2, /openapi/v3 or /openapi/v3/{group path}.
	KindOpenAPI Kind = "openapi"
	// KindVersion is /version.
	KindVersion Kind = "version"
)

// Request is one Kubernetes API request as fleetview judges, audits and
// forwards it: what the hub parsed, what travels to the collector, what the
// member's URL is built from. Its JSON form is part of the request
// channel's protocol (internal/relay.Open).
type Request struct {
	// Cluster is the member a per-cluster path names (/clusters/{name}/...);
	// "" for the fleet view.
	Cluster string `json:"cluster,omitempty"`
	Kind    Kind   `json:"kind"`
	// Verb is as Kubernetes' authorization names it (get, list, watch,
	// create, update, patch, delete, deletecollection); set by WithVerb.
	Verb string `json:"verb,omitempty"`
	// Prefix is "api" (the core group) or "apis": of a resource, of
	// discovery, and of an OpenAPI v3 group path.
	Prefix      string `json:"prefix,omitempty"`
	Group       string `json:"group,omitempty"`
	Version     string `json:"version,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Resource    string `json:"resource,omitempty"`
	Name        string `json:"name,omitempty"`
	Subresource string `json:"subresource,omitempty"`
	// Rest is the path a proxy subresource passes on (after .../proxy).
	Rest []string `json:"rest,omitempty"`
	// OpenAPI is "v2" or "v3" for KindOpenAPI.
	OpenAPI string `json:"openapi,omitempty"`
}

// namespaceSubresources are the subresources of a Namespace: in
// /namespaces/{name}/{status|finalize} the third segment is not a resource
// (as kube-apiserver's request info reads it).
var namespaceSubresources = []string{"status", "finalize"}

// Parse reads a request path in its escaped form (http.Request's
// URL.EscapedPath()): split at every '/' first, then each segment decoded
// once and checked, so an escaped separator stays inside its segment and is
// refused there. An optional /clusters/{name} prefix names the cluster.
// Its error wraps ErrMalformed or ErrNotAPI.
func Parse(escaped string) (Request, error) {
	rest, ok := strings.CutPrefix(escaped, "/")
	if !ok {
		return Request{}, fmt.Errorf("%w: path %q does not start with /", ErrMalformed, escaped)
	}
	raw := strings.Split(rest, "/")
	segs := make([]string, len(raw))
	for i, s := range raw {
		d, err := url.PathUnescape(s)
		if err != nil {
			return Request{}, fmt.Errorf("%w: segment %d %q: %v", ErrMalformed, i+1, s, err)
		}
		if err := checkSegment(d); err != nil {
			return Request{}, fmt.Errorf("%w: segment %d %q: %v", ErrMalformed, i+1, s, err)
		}
		segs[i] = d
	}
	var r Request
	if segs[0] == "clusters" {
		if len(segs) < 3 {
			return Request{}, fmt.Errorf("%w: /clusters/{name}/ is followed by a Kubernetes API path", ErrNotAPI)
		}
		r.Cluster, segs = segs[1], segs[2:]
	}
	if err := r.parseAPI(segs); err != nil {
		return Request{}, err
	}
	return r, nil
}

// checkSegment refuses a decoded segment a path cannot carry as one
// unambiguous segment: re-escaped or decoded again anywhere, it could be
// another path.
func checkSegment(s string) error {
	switch s {
	case "":
		return fmt.Errorf("empty segment")
	case ".", "..":
		return fmt.Errorf("a segment may not be %q", s)
	}
	if !utf8.ValidString(s) {
		// JSON (the request channel) would carry another string.
		return fmt.Errorf("a segment must be UTF-8")
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '/', c == '%', c == '?', c == '#':
			return fmt.Errorf("a segment may not contain %q", c)
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("a segment may not contain control characters")
		}
	}
	return nil
}

func (r *Request) parseAPI(segs []string) error {
	malformed := func(format string, a ...any) error {
		return fmt.Errorf("%w: /%s: %s", ErrMalformed, strings.Join(segs, "/"), fmt.Sprintf(format, a...))
	}
	switch segs[0] {
	case "version":
		if len(segs) != 1 {
			return malformed("nothing follows /version")
		}
		r.Kind = KindVersion
		return nil
	case "openapi":
		r.Kind = KindOpenAPI
		switch {
		case len(segs) == 2 && segs[1] == "v2":
			r.OpenAPI = "v2"
		case len(segs) == 2 && segs[1] == "v3":
			r.OpenAPI = "v3"
		case len(segs) == 4 && segs[1] == "v3" && segs[2] == "api":
			r.OpenAPI, r.Prefix, r.Version = "v3", "api", segs[3]
		case len(segs) == 5 && segs[1] == "v3" && segs[2] == "apis":
			r.OpenAPI, r.Prefix, r.Group, r.Version = "v3", "apis", segs[3], segs[4]
		default:
			return malformed("OpenAPI is /openapi/v2, /openapi/v3, /openapi/v3/api/{version} or /openapi/v3/apis/{group}/{version}")
		}
		return r.checkNames()
	case "api":
		r.Prefix = "api"
		if len(segs) > 1 {
			r.Version = segs[1]
		}
		if len(segs) <= 2 {
			r.Kind = KindDiscovery
			return r.checkNames()
		}
		segs = segs[2:]
	case "apis":
		r.Prefix = "apis"
		if len(segs) > 1 {
			r.Group = segs[1]
		}
		if len(segs) > 2 {
			r.Version = segs[2]
		}
		if len(segs) <= 3 {
			r.Kind = KindDiscovery
			return r.checkNames()
		}
		segs = segs[3:]
	default:
		return fmt.Errorf("%w: /%s", ErrNotAPI, strings.Join(segs, "/"))
	}
	r.Kind = KindResource
	if segs[0] == "namespaces" && len(segs) > 2 && !slices.Contains(namespaceSubresources, segs[2]) {
		r.Namespace, segs = segs[1], segs[2:]
	}
	r.Resource = segs[0]
	if len(segs) > 1 {
		r.Name = segs[1]
	}
	if len(segs) > 2 {
		r.Subresource = segs[2]
	}
	if len(segs) > 3 {
		if r.Subresource != "proxy" {
			return malformed("only a proxy subresource is followed by a path")
		}
		r.Rest = slices.Clone(segs[3:])
	}
	return r.checkNames()
}

// checkNames checks the fields that are Kubernetes identifiers, and the
// shapes kube-apiserver would read otherwise than this package does.
func (r *Request) checkNames() error {
	bad := func(field, v, want string) error {
		return fmt.Errorf("%w: %s %q: %s", ErrMalformed, field, v, want)
	}
	if r.Group != "" && !identifier(r.Group, true) {
		return bad("API group", r.Group, "want a DNS subdomain (lowercase letters, digits, '-' and '.')")
	}
	if r.Version != "" && !identifier(r.Version, false) {
		return bad("API version", r.Version, "want lowercase letters, digits and '-'")
	}
	if r.Resource != "" && !identifier(r.Resource, false) {
		return bad("resource", r.Resource, "want lowercase letters, digits and '-'")
	}
	if r.Subresource != "" && !identifier(r.Subresource, false) {
		return bad("subresource", r.Subresource, "want lowercase letters, digits and '-'")
	}
	if r.Namespace != "" && (!identifier(r.Namespace, false) || len(r.Namespace) > 63) {
		return bad("namespace", r.Namespace, "want a DNS label")
	}
	switch r.Resource {
	case "watch", "proxy":
		// kube-apiserver reads /{version}/watch/... and /{version}/proxy/...
		// as the deprecated verb prefixes.
		return bad("resource", r.Resource, "the deprecated /watch/ and /proxy/ path prefixes are not served through fleetview: use ?watch=true, or the proxy subresource")
	case "status", "finalize":
		if r.Namespace != "" {
			return bad("resource", r.Resource, "in /namespaces/{name}/"+r.Resource+" it is the Namespace's subresource")
		}
	}
	return nil
}

// identifier says whether s is lowercase letters, digits and '-' (and '.'
// with dots), starting and ending with a letter or digit: what Kubernetes
// groups, versions, resources and namespaces are.
func identifier(s string, dots bool) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		case c == '.' && dots && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// segments are r's path segments (decoded), without the cluster prefix.
func (r Request) segments() []string {
	switch r.Kind {
	case KindVersion:
		return []string{"version"}
	case KindOpenAPI:
		s := []string{"openapi", r.OpenAPI}
		if r.Prefix == "" {
			return s
		}
		s = append(s, r.Prefix)
		if r.Prefix == "apis" {
			s = append(s, r.Group)
		}
		return append(s, r.Version)
	}
	s := []string{r.Prefix}
	if r.Prefix == "apis" && r.Group != "" {
		s = append(s, r.Group)
	}
	if r.Version != "" {
		s = append(s, r.Version)
	}
	if r.Kind == KindDiscovery {
		return s
	}
	if r.Namespace != "" {
		s = append(s, "namespaces", r.Namespace)
	}
	for _, v := range []string{r.Resource, r.Name, r.Subresource} {
		if v == "" {
			break
		}
		s = append(s, v)
	}
	return append(s, r.Rest...)
}

// Path is r's path on a member's API (without the cluster prefix), each
// segment escaped (url.PathEscape): the form Parse reads.
func (r Request) Path() string {
	segs := r.segments()
	esc := make([]string, len(segs))
	for i, s := range segs {
		esc[i] = url.PathEscape(s)
	}
	return "/" + strings.Join(esc, "/")
}

// URL is r's path on a member's API below base (its scheme, host and path
// prefix), with query as the raw query: built from r's fields, each
// segment escaped, so nothing in it is decoded again.
func (r Request) URL(base *url.URL, query string) *url.URL {
	segs := r.segments()
	u := *base
	u.Path = strings.TrimSuffix(base.Path, "/") + "/" + strings.Join(segs, "/")
	u.RawPath = strings.TrimSuffix(base.EscapedPath(), "/") + r.Path()
	u.RawQuery, u.Fragment, u.RawFragment, u.Opaque = query, "", "", ""
	return &u
}

// Validate checks a Request that did not come from Parse (one received
// over the request channel) by Parse's rules: every field a valid segment,
// and its path read back the very same request.
func (r Request) Validate() error {
	switch r.Kind {
	case KindResource, KindDiscovery, KindOpenAPI, KindVersion:
	default:
		return fmt.Errorf("%w: kind %q", ErrMalformed, r.Kind)
	}
	if r.Cluster != "" {
		if err := checkSegment(r.Cluster); err != nil {
			return fmt.Errorf("%w: cluster %q: %v", ErrMalformed, r.Cluster, err)
		}
	}
	for _, s := range r.segments() {
		if err := checkSegment(s); err != nil {
			return fmt.Errorf("%w: %q: %v", ErrMalformed, s, err)
		}
	}
	back, err := Parse(r.Path())
	if err != nil {
		return err
	}
	back.Cluster, back.Verb = r.Cluster, r.Verb
	if !back.Equal(r) {
		return fmt.Errorf("%w: %+v reads back as %+v", ErrMalformed, r, back)
	}
	if r.Verb != "" && !slices.Contains(verbs, r.Verb) {
		return fmt.Errorf("%w: verb %q", ErrMalformed, r.Verb)
	}
	return nil
}

// Equal says whether r and o are the same request.
func (r Request) Equal(o Request) bool {
	return r.Cluster == o.Cluster && r.Kind == o.Kind && r.Verb == o.Verb && r.Prefix == o.Prefix && r.Group == o.Group &&
		r.Version == o.Version && r.Namespace == o.Namespace && r.Resource == o.Resource && r.Name == o.Name &&
		r.Subresource == o.Subresource && r.OpenAPI == o.OpenAPI && slices.Equal(r.Rest, o.Rest)
}

var verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

// VerbOf names the request as kube-apiserver's authorization does, from
// its method and query; "" for a method the Kubernetes API does not take.
func VerbOf(method string, query url.Values, r Request) string {
	switch method {
	case http.MethodGet, http.MethodHead:
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if r.Kind == KindResource && r.Name == "" {
			return "deletecollection"
		}
		return "delete"
	default:
		return ""
	}
	if r.Kind != KindResource || r.Name != "" {
		return "get"
	}
	// As kube-apiserver decodes ListOptions.Watch: any value but "0" or
	// "false" is true.
	if w, ok := query["watch"]; ok && len(w) > 0 && w[0] != "0" && !strings.EqualFold(w[0], "false") {
		return "watch"
	}
	return "list"
}

// CheckQuery reads a raw query as kube-apiserver will, refusing one that
// could be read as more than a query ('#', spaces, control characters) or
// that does not parse (a ';' separator, a bad escape).
func CheckQuery(raw string) (url.Values, error) {
	if strings.ContainsFunc(raw, func(c rune) bool { return c == '#' || c <= ' ' || c == 0x7f }) || !utf8.ValidString(raw) {
		return nil, fmt.Errorf("%w: query %q: a query may not contain '#', spaces, control characters or bytes that are not UTF-8", ErrMalformed, raw)
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: query %q: %v", ErrMalformed, raw, err)
	}
	return q, nil
}

// WithVerb is r with its Verb for method and query.
func (r Request) WithVerb(method string, query url.Values) Request {
	r.Verb = VerbOf(method, query, r)
	return r
}

// ResourceRequest is the request for resource (name "": the collection)
// of gv in namespace ("": cluster-scoped or every namespace).
func ResourceRequest(gv schema.GroupVersion, namespace, resource, name string) Request {
	prefix := "api"
	if gv.Group != "" {
		prefix = "apis"
	}
	return Request{Kind: KindResource, Prefix: prefix, Group: gv.Group, Version: gv.Version, Namespace: namespace, Resource: resource, Name: name}
}

// GroupVersion is the API group and version a resource or discovery
// request names.
func (r Request) GroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: r.Group, Version: r.Version}
}

// GroupResource is the resource a resource request names (empty
// otherwise).
func (r Request) GroupResource() schema.GroupResource {
	if r.Kind != KindResource {
		return schema.GroupResource{}
	}
	return schema.GroupResource{Group: r.Group, Resource: r.Resource}
}

// Streams says whether r is a subresource that needs a bidirectional
// stream (exec, attach, port-forward): never forwarded.
func (r Request) Streams() bool {
	switch r.Subresource {
	case "exec", "attach", "portforward":
		return r.Kind == KindResource
	}
	return false
}

// Proxies says whether r is a proxy subresource (nodes/, pods/ or
// services/{name}/proxy[/...]): the member passes it on with its own
// network position (the kubelet's /run through nodes/proxy is an exec).
func (r Request) Proxies() bool { return r.Kind == KindResource && r.Subresource == "proxy" }
