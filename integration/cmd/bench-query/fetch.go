package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
	"github.com/fleetview/fleetview/internal/rawjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// endpoint is one HTTP server answering Kubernetes list and get paths: a
// member kube-apiserver (TLS, token) or fleetview (plain loopback), read
// with the same code so only the servers differ.
type endpoint struct {
	base   string // scheme://host[:port][/prefix]
	client *http.Client
	// accept is the Accept header ("" = application/json).
	accept string
}

// tableAccept is what kubectl get sends: a Table, else JSON.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

// asTable is e asking for Tables, as kubectl get does.
func (e endpoint) asTable() endpoint {
	e.accept = tableAccept
	return e
}

func apiserverEndpoint(cfg *rest.Config) (endpoint, error) {
	c := rest.CopyConfig(cfg)
	// No gzip: on loopback it only costs the apiserver CPU, which would
	// flatter fleetview (which does not compress).
	c.DisableCompression = true
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return endpoint{}, err
	}
	return endpoint{base: c.Host, client: hc}, nil
}

func plainEndpoint(base string) endpoint {
	return endpoint{base: base, client: &http.Client{Transport: &http.Transport{
		DisableCompression: true, MaxIdleConnsPerHost: 64,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}}
}

// fetch GETs path and reads the whole body: the time it takes is the time
// to the last byte.
func (e endpoint) fetch(ctx context.Context, path string, q url.Values) ([]byte, error) {
	u := e.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	accept := e.accept
	if accept == "" {
		accept = "application/json"
	}
	req.Header.Set("Accept", accept)
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %.300s", u, resp.StatusCode, b)
	}
	return b, nil
}

// topMember decodes the top-level member key of a JSON object into v,
// stopping there. kube-apiserver writes a list's metadata before its
// items, and so does fleetview unless its answer took several reads of
// the cache (then metadata comes last, where it is known: docs/api.md,
// "Paged lists"), so the members before it are skipped with the raw
// scanner, as a streaming client would, not decoded.
func topMember(b []byte, key string, v any) error {
	found := errors.New("found")
	_, err := rawjson.EachMember(b, 0, func(m rawjson.Member) (int, error) {
		end, err := rawjson.SkipValue(b, m.ValueStart)
		if err != nil || string(m.Key) != key {
			return end, err
		}
		if err := json.Unmarshal(b[m.ValueStart:end], v); err != nil {
			return end, err
		}
		return end, found
	})
	switch {
	case errors.Is(err, found):
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("answer without %s", key)
}

func listMeta(b []byte) (metav1.ListMeta, error) {
	var lm metav1.ListMeta
	return lm, topMember(b, "metadata", &lm)
}

// pages reads a whole list from e at path with query q, paging by limit
// (0: one answer); next reads an answer's continue token.
func (e endpoint) pages(ctx context.Context, path string, q url.Values, limit int64, next func([]byte) (string, error)) ([][]byte, error) {
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	var pages [][]byte
	for {
		b, err := e.fetch(ctx, path, q)
		if err != nil {
			return nil, err
		}
		pages = append(pages, b)
		if limit == 0 {
			return pages, nil
		}
		cont, err := next(b)
		if err != nil || cont == "" {
			return pages, err
		}
		q.Set("continue", cont)
		q.Del("resourceVersion") // a continue token pins its own
	}
}

// kubeContinue is a Kubernetes list's metadata.continue.
func kubeContinue(b []byte) (string, error) {
	lm, err := listMeta(b)
	return lm.Continue, err
}

// listPages reads a whole Kubernetes list from e, selected by sel.
func (e endpoint) listPages(ctx context.Context, path, sel string, limit int64) ([][]byte, error) {
	q := url.Values{}
	if sel != "" {
		q.Set("labelSelector", sel)
	}
	return e.pages(ctx, path, q, limit, kubeContinue)
}

// fanoutRead lists from every apiserver in parallel with
// resourceVersion=0 (their watch caches), each paging by limit.
func fanoutRead(ctx context.Context, eps []endpoint, sel string, limit int64) ([][]byte, error) {
	return gather(ctx, len(eps), func(ctx context.Context, i int) ([][]byte, error) {
		q := url.Values{"resourceVersion": {"0"}}
		if sel != "" {
			q.Set("labelSelector", sel)
		}
		return eps[i].pages(ctx, "/api/v1/pods", q, limit, kubeContinue)
	})
}

// gather runs read for 0..n-1 in parallel and joins their bodies in order.
func gather(ctx context.Context, n int, read func(context.Context, int) ([][]byte, error)) ([][]byte, error) {
	res := make([][][]byte, n)
	g, gctx := errgroup.WithContext(ctx)
	for i := range n {
		g.Go(func() error {
			var err error
			res[i], err = read(gctx, i)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var all [][]byte
	for _, r := range res {
		all = append(all, r...)
	}
	return all, nil
}

// decodePodLists decodes Kubernetes list answers into typed Pods, the same
// way for either side, and returns how many items they held.
func decodePodLists(bodies [][]byte) (int, error) {
	n := 0
	for _, b := range bodies {
		var l corev1.PodList
		if err := json.Unmarshal(b, &l); err != nil {
			return 0, err
		}
		n += len(l.Items)
	}
	return n, nil
}

// countMember returns a count of the elements of each answer's top-level
// array member key ("items" of a list, "rows" of a Table), read with the
// raw scanner: every byte is checked by the JSON grammar, nothing is
// decoded. rawjson's own array reader stops at its 4 MiB bound for one
// object; a whole list is larger.
func countMember(key string) func([][]byte) (int, error) {
	return func(bodies [][]byte) (int, error) {
		n := 0
		for _, b := range bodies {
			found := false
			end, err := rawjson.EachMember(b, 0, func(m rawjson.Member) (int, error) {
				if string(m.Key) != key {
					return rawjson.SkipValue(b, m.ValueStart)
				}
				found = true
				return benchutil.CountArray(b, m.ValueStart, &n)
			})
			if err != nil {
				return 0, err
			}
			if !found {
				return 0, fmt.Errorf("answer without %s", key)
			}
			if rawjson.SkipSpace(b, end) != len(b) {
				return 0, fmt.Errorf("bytes after the answer at offset %d", end)
			}
		}
		return n, nil
	}
}

// countItems counts items already split one []byte each (gRPC answers).
func countItems(items [][]byte) (int, error) { return len(items), nil }

// decodeRESTPages decodes fleetview /v1 list answers into typed Pods.
func decodeRESTPages(bodies [][]byte) (int, error) {
	n := 0
	for _, b := range bodies {
		var l struct {
			Items []corev1.Pod `json:"items"`
		}
		if err := json.Unmarshal(b, &l); err != nil {
			return 0, err
		}
		n += len(l.Items)
	}
	return n, nil
}

// restPages reads a whole /v1 list, paging by limit (0: one answer).
func restPages(ctx context.Context, e endpoint, sel string, limit int64) ([][]byte, error) {
	return e.pages(ctx, "/v1/resources/core/v1/pods", url.Values{"labelSelector": {sel}}, limit, func(b []byte) (string, error) {
		var cont string
		return cont, topMember(b, "continue", &cont)
	})
}

// grpcPages reads a whole list over gRPC in the default (stored JSON)
// shape, paging by limit.
func grpcPages(ctx context.Context, q fleetviewv1.QueryServiceClient, sel string, limit int64) ([][]byte, error) {
	var items [][]byte
	cont := ""
	for {
		resp, err := q.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", LabelSelector: sel, Limit: limit, Continue: cont})
		if err != nil {
			return nil, err
		}
		items = append(items, resp.GetRawItems()...)
		if cont = resp.GetContinue(); cont == "" {
			return items, nil
		}
	}
}

// decodeItems decodes stored-JSON items into typed Pods.
func decodeItems(items [][]byte) (int, error) {
	for _, it := range items {
		var p corev1.Pod
		if err := json.Unmarshal(it, &p); err != nil {
			return 0, err
		}
	}
	return len(items), nil
}
