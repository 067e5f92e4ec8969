package collector

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/fleetview/fleetview/internal/registry"
)

// expansion is what one registry's selectors stand for on this member.
type expansion struct {
	// exact are single-kind selectors, each with at most one namespace:
	// the registry's exact selectors and every kind its wildcards
	// expanded to, at the member's preferred version.
	exact []registry.ResourceSelector
	// wildcard: a selector of the registry is a pattern, so the member's
	// discovery is followed (a CRD installed or removed changes exact).
	wildcard bool
	// expanded says, per wildcard, how many kinds it stood for;
	// left, which kinds a wildcard matched but did not cache, and why.
	expanded []string
	left     []string
}

// discoveryReader is what expanding a wildcard reads of a member's
// discovery (its cached client in production).
type discoveryReader interface {
	ServerPreferredResources() ([]*metav1.APIResourceList, error)
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// expand turns a registry's selectors into exact ones against the member's
// discovery. A kind a selector of the same registry names exactly is not
// expanded again by its wildcards (the named version wins). A discovery
// that failed for some groups expands the others and reports those as
// left; one that failed entirely is an error (reconcile retries).
func expand(disc discoveryReader, sels []registry.ResourceSelector) (expansion, error) {
	var e expansion
	named := map[schema.GroupKind]bool{}
	for _, s := range sels {
		if !s.IsWildcard() {
			named[s.GroupVersionKind().GroupKind()] = true
			e.exact = append(e.exact, perNamespace(s)...)
		}
	}
	var lists []*metav1.APIResourceList
	var failed error
	for i, s := range sels {
		if !s.IsWildcard() {
			continue
		}
		if !e.wildcard {
			e.wildcard = true
			var err error
			lists, err = disc.ServerPreferredResources()
			var partial *discovery.ErrGroupDiscoveryFailed
			if err != nil && !errors.As(err, &partial) {
				return expansion{}, fmt.Errorf("discovery for wildcard selectors: %w", err)
			}
			failed = err
		}
		n := 0
		left := map[string][]string{} // why -> kinds
		limited := s.Namespace != "" || len(s.Namespaces) > 0
		for _, l := range versionLists(disc, s, lists) {
			gv, err := schema.ParseGroupVersion(l.GroupVersion)
			if err != nil {
				continue
			}
			for _, r := range l.APIResources {
				if strings.Contains(r.Name, "/") {
					continue // a subresource
				}
				gvk := gv.WithKind(r.Kind)
				if named[gvk.GroupKind()] {
					continue // a selector of the registry names it exactly
				}
				ok, why := s.Selects(gvk)
				switch {
				case !ok && why == "":
					continue // not matched at all
				case ok && !(slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch")):
					why = "cannot be listed and watched"
				case ok && limited && !r.Namespaced:
					why = "cluster-scoped, and the selector names namespaces"
				}
				if why != "" {
					left[why] = append(left[why], describeGVK(gvk))
					continue
				}
				n++
				e.exact = append(e.exact, perNamespace(registry.ResourceSelector{
					APIVersion: gv.String(), Kind: r.Kind, Namespace: s.Namespace, Namespaces: s.Namespaces})...)
			}
		}
		e.expanded = append(e.expanded, fmt.Sprintf("selector %d (%s %s): %d kinds, one list and watch of this cluster each", i, s.APIVersion, s.Kind, n))
		whys := make([]string, 0, len(left))
		for why := range left {
			whys = append(whys, why)
		}
		sort.Strings(whys)
		for _, why := range whys {
			sort.Strings(left[why])
			e.left = append(e.left, fmt.Sprintf("selector %d left out %s: %s", i, strings.Join(left[why], ", "), why))
		}
	}
	if failed != nil {
		e.left = append(e.left, "discovery failed for some groups, not expanded until it answers: "+failed.Error())
	}
	return e, nil
}

// versionLists are the resource lists a wildcard reads: the preferred
// version of every group, or for a selector bound to one version
// ("apps/v1", kind "*") that version's list.
func versionLists(disc discoveryReader, s registry.ResourceSelector, preferred []*metav1.APIResourceList) []*metav1.APIResourceList {
	gvk := s.GroupVersionKind()
	if strings.HasSuffix(s.APIVersion, "/"+registry.Wildcard) || s.APIVersion == registry.Wildcard || gvk.Version == "" {
		return preferred
	}
	l, err := disc.ServerResourcesForGroupVersion(gvk.GroupVersion().String())
	if err != nil || l == nil {
		return nil
	}
	return []*metav1.APIResourceList{l}
}

// perNamespace splits a selector's namespace list into one selector per
// namespace (the shape the rest of the collector reads); none means all.
func perNamespace(s registry.ResourceSelector) []registry.ResourceSelector {
	if len(s.Namespaces) == 0 {
		s.Namespaces = nil
		return []registry.ResourceSelector{s}
	}
	nss := slices.Clone(s.Namespaces)
	if s.Namespace != "" {
		nss = append(nss, s.Namespace)
	}
	out := make([]registry.ResourceSelector, 0, len(nss))
	for _, ns := range nss {
		out = append(out, registry.ResourceSelector{APIVersion: s.APIVersion, Kind: s.Kind, Namespace: ns})
	}
	return out
}
