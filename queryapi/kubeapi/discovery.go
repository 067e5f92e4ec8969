package kubeapi

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
)

// aggregatedContentType is the aggregated discovery document kubectl (>= 1.30)
// asks for first; without it in Accept the legacy documents are served and
// clients fetch each group/version.
const aggregatedContentType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// readVerbs are the only verbs fleetview serves.
var readVerbs = metav1.Verbs{"get", "list", "watch"}

func (h *Handler) serveVersion(w http.ResponseWriter, req *request) {
	_, cls, err := h.catalogView(req.r, req.cluster)
	if err != nil {
		writeStatus(w, toKubeStatus(err, schema.GroupResource{}, ""))
		return
	}
	// The lowest member version: what every cluster behind the view serves.
	v := ""
	for _, c := range cls {
		if kv := c.KubernetesVersion; kv != "" && (v == "" || kv < v) {
			v = kv
		}
	}
	info := version.Info{GitVersion: v, Platform: "fleetview"}
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) >= 2 {
		info.Major, info.Minor = parts[0], parts[1]
	}
	writeJSON(w, http.StatusOK, "application/json", info)
}

// wantsAggregated reports whether Accept lists aggregated discovery v2.
func wantsAggregated(r *http.Request) bool {
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		p := mediaParams(a)
		if p["g"] == "apidiscovery.k8s.io" && p["v"] == "v2" && p["as"] == "APIGroupDiscoveryList" {
			return true
		}
	}
	return false
}

// mediaParams parses the parameters of one media range.
func mediaParams(s string) map[string]string {
	out := map[string]string{}
	parts := strings.Split(s, ";")
	out[""] = strings.TrimSpace(parts[0])
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out
}

// groupVersions groups the catalog: group -> versions (sorted) -> resources.
func groupVersions(cat []cached) (groups []string, versions map[string][]string, byGV map[schema.GroupVersion][]cached) {
	versions = map[string][]string{}
	byGV = map[schema.GroupVersion][]cached{}
	for _, c := range cat {
		gv := c.gvr.GroupVersion()
		if _, ok := byGV[gv]; !ok {
			if _, ok := versions[gv.Group]; !ok {
				groups = append(groups, gv.Group)
			}
			versions[gv.Group] = append(versions[gv.Group], gv.Version)
		}
		byGV[gv] = append(byGV[gv], c)
	}
	sort.Strings(groups)
	return groups, versions, byGV
}

func (h *Handler) serveDiscoveryRoot(w http.ResponseWriter, req *request, core bool) {
	cat, _, err := h.catalogView(req.r, req.cluster)
	if err != nil {
		writeStatus(w, toKubeStatus(err, schema.GroupResource{}, ""))
		return
	}
	groups, versions, byGV := groupVersions(cat)
	if wantsAggregated(req.r) {
		list := apidiscoveryv2.APIGroupDiscoveryList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"}}
		for _, g := range groups {
			if (g == "") != core {
				continue
			}
			d := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g}}
			for _, v := range versions[g] {
				vd := apidiscoveryv2.APIVersionDiscovery{Version: v, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
				for _, c := range byGV[schema.GroupVersion{Group: g, Version: v}] {
					scope := apidiscoveryv2.ScopeCluster
					if c.namespaced {
						scope = apidiscoveryv2.ScopeNamespace
					}
					vd.Resources = append(vd.Resources, apidiscoveryv2.APIResourceDiscovery{
						Resource: c.gvr.Resource, ResponseKind: &metav1.GroupVersionKind{Group: g, Version: v, Kind: c.kind},
						Scope: scope, SingularResource: strings.ToLower(c.kind), Verbs: readVerbs,
						ShortNames: c.names.short, Categories: c.names.categories,
					})
				}
				d.Versions = append(d.Versions, vd)
			}
			list.Items = append(list.Items, d)
		}
		if core && len(list.Items) == 0 {
			// kubectl expects the core group to exist.
			list.Items = append(list.Items, apidiscoveryv2.APIGroupDiscovery{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}}})
		}
		writeJSON(w, http.StatusOK, aggregatedContentType, list)
		return
	}
	if core {
		writeJSON(w, http.StatusOK, "application/json", metav1.APIVersions{
			TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"},
		})
		return
	}
	list := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
	for _, g := range groups {
		if g == "" {
			continue
		}
		list.Groups = append(list.Groups, apiGroup(g, versions[g]))
	}
	writeJSON(w, http.StatusOK, "application/json", list)
}

func apiGroup(g string, versions []string) metav1.APIGroup {
	ag := metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: g}
	for _, v := range versions {
		ag.Versions = append(ag.Versions, metav1.GroupVersionForDiscovery{GroupVersion: g + "/" + v, Version: v})
	}
	ag.PreferredVersion = ag.Versions[0]
	return ag
}

func (h *Handler) serveGroup(w http.ResponseWriter, req *request, group string) {
	cat, _, err := h.catalogView(req.r, req.cluster)
	if err != nil {
		writeStatus(w, toKubeStatus(err, schema.GroupResource{}, ""))
		return
	}
	_, versions, _ := groupVersions(cat)
	if len(versions[group]) == 0 || group == "" {
		writeStatus(w, toKubeStatus(fmt.Errorf("%w: group %q is not cached", ErrUnknownResource, group), schema.GroupResource{}, ""))
		return
	}
	writeJSON(w, http.StatusOK, "application/json", apiGroup(group, versions[group]))
}

func (h *Handler) serveResourceList(w http.ResponseWriter, req *request) {
	cat, _, err := h.catalogView(req.r, req.cluster)
	if err != nil {
		writeStatus(w, toKubeStatus(err, schema.GroupResource{}, ""))
		return
	}
	_, _, byGV := groupVersions(cat)
	rs, ok := byGV[req.gv]
	if !ok && !(req.gv.Group == "" && req.gv.Version == "v1") {
		writeStatus(w, toKubeStatus(fmt.Errorf("%w: %s is not cached", ErrUnknownResource, req.gv), schema.GroupResource{}, ""))
		return
	}
	list := metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: req.gv.String(), APIResources: []metav1.APIResource{}}
	for _, c := range rs {
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: c.gvr.Resource, SingularName: strings.ToLower(c.kind), Namespaced: c.namespaced, Kind: c.kind,
			Verbs: readVerbs, ShortNames: c.names.short, Categories: c.names.categories,
		})
	}
	writeJSON(w, http.StatusOK, "application/json", list)
}
