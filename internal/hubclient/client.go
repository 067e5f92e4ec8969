package hubclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// maxBody bounds an answer read into memory (a page of a change feed with
// objects is the largest the tools ask for).
const maxBody = 256 << 20

// KubeOptions choose a kubeconfig context as kubectl does (KUBECONFIG and
// ~/.kube/config when Kubeconfig is empty), with overrides.
type KubeOptions struct {
	Kubeconfig string
	Context    string
	// Server and Token override the context's server and credentials.
	Server string
	Token  string
}

// RESTConfig loads the kubeconfig context with the overrides.
func (o KubeOptions) RESTConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	over := &clientcmd.ConfigOverrides{CurrentContext: o.Context}
	over.ClusterInfo.Server = o.Server
	over.AuthInfo.Token = o.Token
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, over).ClientConfig()
	if err != nil {
		where := "the kubeconfig (KUBECONFIG or ~/.kube/config)"
		if o.Kubeconfig != "" {
			where = "--kubeconfig " + o.Kubeconfig
		}
		if o.Context != "" {
			where += ", --context " + o.Context
		}
		return nil, fmt.Errorf("%w: %s: %v (write one with `fleetview kubeconfig`, or pass --server)", ErrInvalidConfig, where, err)
	}
	// client-go sends a kubeconfig's credentials over TLS only; a token
	// given on the command line is sent as asked (a loopback hub).
	if o.Token != "" {
		rc.BearerToken, rc.BearerTokenFile = o.Token, ""
	}
	return rc, nil
}

// Client calls the hub's REST API.
type Client struct {
	http *http.Client
	base string
	// cluster is the member a /clusters/<name> context points at.
	cluster string
}

// New is a client of the REST API of the hub rc points at.
func New(rc *rest.Config) (*Client, error) {
	u, err := url.Parse(rc.Host)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: server %q is not an http(s) URL", ErrInvalidConfig, rc.Host)
	}
	base, cluster := splitServer(u)
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return &Client{http: hc, base: base, cluster: cluster}, nil
}

// splitServer takes a member context's /clusters/<name> off the server
// URL: the REST API is at the hub's base.
func splitServer(u *url.URL) (base, cluster string) {
	path := strings.TrimSuffix(u.Path, "/")
	if i := strings.LastIndex(path, "/clusters/"); i >= 0 && !strings.Contains(path[i+len("/clusters/"):], "/") {
		cluster, _ = url.PathUnescape(path[i+len("/clusters/"):])
		path = path[:i]
	}
	b := *u
	b.Path, b.RawPath, b.RawQuery, b.Fragment = path, "", "", ""
	return strings.TrimSuffix(b.String(), "/"), cluster
}

// Base is the hub's base URL.
func (c *Client) Base() string { return c.base }

// Cluster is the member cluster the context names, empty for the fleet.
func (c *Client) Cluster() string { return c.cluster }

// StatusError is a non-2xx answer: its HTTP status and the Kubernetes
// Status body's message and reason.
type StatusError struct {
	Path    string
	Code    int
	Reason  string
	Message string
}

func (e *StatusError) Error() string {
	msg := e.Message
	switch e.Code {
	case http.StatusUnauthorized:
		msg = "not authenticated (401): the token or certificate was rejected; check --token or the kubeconfig's user" + suffix(e.Message)
	case http.StatusForbidden:
		msg = "forbidden (403)" + suffix(e.Message)
	case http.StatusNotFound:
		if e.Message == "" || strings.Contains(e.Message, "Not Found") {
			msg = "not found (404): this hub does not serve " + e.Path + " (an older fleetview?)"
		}
	}
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("GET %s: %s", e.Path, msg)
}

func (e *StatusError) Unwrap() error { return ErrStatus }

func suffix(m string) string {
	if m == "" {
		return ""
	}
	return ": " + m
}

// Get asks path (under the base) with the query and decodes the JSON
// answer into out.
func (c *Client) Get(ctx context.Context, path string, q url.Values, out any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return err
		}
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, c.base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, c.base, err)
	}
	if resp.StatusCode/100 != 2 {
		se := &StatusError{Path: path, Code: resp.StatusCode}
		var st struct{ Message, Reason string }
		if json.Unmarshal(b, &st) == nil {
			se.Message, se.Reason = st.Message, st.Reason
		} else {
			se.Message = strings.TrimSpace(string(b))
		}
		return se
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("GET %s: the answer is not the expected JSON: %w", path, err)
	}
	return nil
}
