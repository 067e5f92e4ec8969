package collector

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/fleetview/fleetview/internal/kubepath"
	"github.com/fleetview/fleetview/internal/relay"
)

// ActClasses are the kinds of forwarded request a collector serves
// (issue #30); all are off by default.
type ActClasses struct {
	// Writes: create, update, patch, delete, deletecollection, and writes
	// of subresources (status, scale, eviction).
	Writes bool
	// Logs: GET of pods/log, followed or not.
	Logs bool
	// Reads: every other GET (resources no registry caches, discovery,
	// OpenAPI, subresources).
	Reads bool
	// Proxy: the proxy subresources of nodes, pods and services, any
	// method. Exec-equivalent (the kubelet's /run through nodes/proxy
	// runs a command; a pod or service proxy reaches in-cluster endpoints
	// from where the member's apiserver stands), so never part of reads
	// or writes: only this class forwards them.
	Proxy bool
}

// Any says whether the collector serves the request channel at all.
func (a ActClasses) Any() bool { return a.Writes || a.Logs || a.Reads || a.Proxy }

// ParseActClasses reads --act-through: a comma-separated list of writes,
// logs, reads and proxy ("" is none).
func ParseActClasses(s string) (ActClasses, error) {
	var a ActClasses
	for _, c := range strings.Split(s, ",") {
		switch strings.TrimSpace(c) {
		case "":
		case "writes":
			a.Writes = true
		case "logs":
			a.Logs = true
		case "reads":
			a.Reads = true
		case "proxy":
			a.Proxy = true
		default:
			return ActClasses{}, fmt.Errorf("%w: act-through class %q: want writes, logs, reads or proxy", ErrInvalidOptions, c)
		}
	}
	return a, nil
}

// ProxyRefusal is the message of a proxy subresource refused (501).
const ProxyRefusal = "the proxy subresources (nodes, pods and services .../proxy) are not forwarded through fleetview unless the hub's --act-through-proxy and this cluster's collector's --act-through proxy class allow them: a node's proxy reaches the kubelet's /run (a command in a container), a pod's or service's reaches in-cluster endpoints from the member's network"

// requestHeaders are the request headers passed on to the member:
// negotiation, the body's type and what kubectl says of itself. Never
// credentials or impersonation headers: the caller is the one the hub
// authenticated, set below.
var requestHeaders = []string{"Accept", "Content-Type", "User-Agent", "Kubectl-Command", "Kubectl-Session"}

// responseHeaders are the member's headers passed back.
var responseHeaders = []string{"Content-Type", "Warning", "Audit-Id", "Cache-Control", "X-Content-Type-Options"}

// ActThrough serves forwarded requests against the member apiserver as
// the caller: its own credentials only authenticate the impersonation
// (Impersonate-User, Impersonate-Group), so the member's authentication,
// RBAC and admission decide every request as they would the caller's own.
type ActThrough struct {
	classes ActClasses
	base    *url.URL
	rt      http.RoundTripper
}

// NewActThrough returns the handler of forwarded requests for the member
// rc reaches, serving the classes given.
func NewActThrough(rc *rest.Config, classes ActClasses) (*ActThrough, error) {
	if rc.Impersonate.UserName != "" || len(rc.Impersonate.Groups) > 0 {
		return nil, fmt.Errorf("%w: the collector's kubeconfig impersonates already; act-through impersonates each caller", ErrInvalidOptions)
	}
	host := rc.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	base, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("%w: apiserver address %q: %v", ErrInvalidOptions, rc.Host, err)
	}
	rt, err := rest.TransportFor(rc)
	if err != nil {
		return nil, err
	}
	return &ActThrough{classes: classes, base: base, rt: rt}, nil
}

// actClass names the class of a request; "" for one never forwarded
// (exec, attach, port-forward).
func actClass(method string, t kubepath.Request) string {
	switch {
	case t.Streams():
		return ""
	case t.Proxies():
		// Whatever the method: through the member, the collector's
		// network position (and the kubelet's /run, an exec).
		return "proxy"
	case method != http.MethodGet && method != http.MethodHead:
		return "writes"
	case t.Resource == "pods" && t.Subresource == "log":
		return "logs"
	}
	return "reads"
}

func (a *ActThrough) allowed(class string) bool {
	switch class {
	case "writes":
		return a.classes.Writes
	case "logs":
		return a.classes.Logs
	case "reads":
		return a.classes.Reads
	case "proxy":
		return a.classes.Proxy
	}
	return false
}

func (a *ActThrough) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	caller, ok := relay.CallerFrom(r.Context())
	if !ok || caller.User == "" {
		writeActStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "a forwarded request needs the caller the hub authenticated")
		return
	}
	// The request as the hub authorized it, checked again by the same
	// rules: the member's URL is built from its fields, never from a
	// path read again (issue #43).
	target, ok := relay.TargetFrom(r.Context())
	if !ok {
		writeActStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "a forwarded request needs the typed request the hub authorized")
		return
	}
	if err := target.Validate(); err != nil {
		writeActStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return
	}
	if target.Kind == kubepath.KindVersion || (target.Kind != kubepath.KindResource && r.Method != http.MethodGet && r.Method != http.MethodHead) {
		writeActStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "only discovery, OpenAPI and resources are forwarded, discovery and OpenAPI only read")
		return
	}
	query, err := kubepath.CheckQuery(r.URL.RawQuery)
	if err != nil {
		writeActStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return
	}
	if v := kubepath.VerbOf(r.Method, query, target); v == "" || v != target.Verb {
		writeActStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
			fmt.Sprintf("method %s with query %q is verb %q, the request says %q", r.Method, r.URL.RawQuery, v, target.Verb))
		return
	}
	class := actClass(r.Method, target)
	if class == "" {
		writeActStatus(w, http.StatusNotImplemented, metav1.StatusReasonMethodNotAllowed,
			"exec, attach and port-forward are not forwarded through fleetview: the request channel carries no bidirectional streams")
		return
	}
	if class == "proxy" && !a.classes.Proxy {
		writeActStatus(w, http.StatusNotImplemented, metav1.StatusReasonMethodNotAllowed, ProxyRefusal)
		return
	}
	if !a.allowed(class) {
		writeActStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			fmt.Sprintf("this cluster's collector does not forward %s (its --act-through)", class))
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, a.base.String(), r.Body)
	if err != nil {
		writeActStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return
	}
	out.URL = target.URL(a.base, r.URL.RawQuery)
	out.ContentLength = r.ContentLength
	if r.ContentLength == 0 {
		out.Body = http.NoBody
	}
	for _, h := range requestHeaders {
		if v := r.Header.Values(h); len(v) > 0 {
			out.Header[h] = v
		}
	}
	out.Header.Set("Impersonate-User", caller.User)
	for _, g := range caller.Groups {
		out.Header.Add("Impersonate-Group", g)
	}
	resp, err := a.rt.RoundTrip(out)
	if err != nil {
		writeActStatus(w, http.StatusBadGateway, metav1.StatusReasonServiceUnavailable,
			fmt.Sprintf("the member apiserver did not answer the collector: %v", err))
		return
	}
	defer resp.Body.Close()
	for _, h := range responseHeaders {
		if v := resp.Header.Values(h); len(v) > 0 {
			w.Header()[h] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	// Every write goes out at once (relay sends each as frames): a
	// followed log or a watch streams as the member sends it.
	_, _ = io.Copy(w, resp.Body)
}

func writeActStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	b, _ := json.Marshal(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
