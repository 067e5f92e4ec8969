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
}

// Any says whether the collector serves the request channel at all.
func (a ActClasses) Any() bool { return a.Writes || a.Logs || a.Reads }

// ParseActClasses reads --act-through: a comma-separated list of writes,
// logs and reads ("" is none).
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
		default:
			return ActClasses{}, fmt.Errorf("%w: act-through class %q: want writes, logs or reads", ErrInvalidOptions, c)
		}
	}
	return a, nil
}

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

// actClass names the class of a request; "" for one never forwarded.
func actClass(method, path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	last := segs[len(segs)-1]
	// .../pods/{name}/{subresource}
	isPodSub := len(segs) >= 4 && segs[len(segs)-3] == "pods"
	if isPodSub && (last == "exec" || last == "attach" || last == "portforward") {
		return ""
	}
	if method != http.MethodGet && method != http.MethodHead {
		return "writes"
	}
	if isPodSub && last == "log" {
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
	}
	return false
}

func (a *ActThrough) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	caller, ok := relay.CallerFrom(r.Context())
	if !ok || caller.User == "" {
		writeActStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "a forwarded request needs the caller the hub authenticated")
		return
	}
	class := actClass(r.Method, r.URL.Path)
	if class == "" {
		writeActStatus(w, http.StatusNotImplemented, metav1.StatusReasonMethodNotAllowed,
			"exec, attach and port-forward are not forwarded through fleetview: the request channel carries no bidirectional streams")
		return
	}
	if !a.allowed(class) {
		writeActStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			fmt.Sprintf("this cluster's collector does not forward %s (its --act-through)", class))
		return
	}
	u := *a.base
	u.Path = strings.TrimSuffix(a.base.Path, "/") + r.URL.Path
	u.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), r.Body)
	if err != nil {
		writeActStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return
	}
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
