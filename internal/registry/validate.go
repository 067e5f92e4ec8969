package registry

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Validate checks r against every rule and returns all violations at once,
// each naming its field path (e.g. spec.resourceSelectors[0].namespace), so a
// user fixes a manifest in one round trip. An empty list means valid. Use
// ToError to turn the list into an error wrapping ErrInvalid.
//
// An empty TypeMeta is accepted, because objects built in code (e.g. from a
// gRPC request) carry none; a non-empty one must name a supported type.
func Validate(r *ResourceRegistry) field.ErrorList {
	if r == nil {
		r = &ResourceRegistry{}
	}
	var errs field.ErrorList
	errs = append(errs, validateTypeMeta(r.TypeMeta)...)
	// Cluster-scoped like Karmada's: a namespace is forbidden.
	errs = append(errs, apivalidation.ValidateObjectMeta(&r.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	errs = append(errs, validateSpec(&r.Spec, field.NewPath("spec"))...)
	return errs
}

// ValidateClusterAffinity checks a ClusterAffinity the way Karmada does
// (fieldSelector keys provider/region/zone with In/NotIn only) and more
// (label selector syntax, cluster name syntax). Valid affinities never hit
// Matches' fail-closed paths.
func ValidateClusterAffinity(a *ClusterAffinity, fldPath *field.Path) field.ErrorList {
	if a == nil {
		return nil
	}
	var errs field.ErrorList

	lsPath := fldPath.Child("labelSelector")
	lsErrs := metav1validation.ValidateLabelSelector(a.LabelSelector, metav1validation.LabelSelectorValidationOptions{}, lsPath)
	errs = append(errs, lsErrs...)
	if len(lsErrs) == 0 && a.LabelSelector != nil {
		// Matches converts with LabelSelectorAsSelector; should it ever be
		// stricter than ValidateLabelSelector, catch that here rather than
		// let a "valid" registry match nothing.
		if _, err := metav1.LabelSelectorAsSelector(a.LabelSelector); err != nil {
			errs = append(errs, field.Invalid(lsPath, a.LabelSelector.String(), err.Error()))
		}
	}

	if a.FieldSelector != nil {
		exprsPath := fldPath.Child("fieldSelector", "matchExpressions")
		for i, expr := range a.FieldSelector.MatchExpressions {
			errs = append(errs, validateFieldRequirement(expr, exprsPath.Index(i))...)
		}
	}

	errs = append(errs, validateClusterNames(a.ClusterNames, fldPath.Child("clusterNames"))...)
	errs = append(errs, validateClusterNames(a.Exclude, fldPath.Child("exclude"))...)
	return errs
}

// ValidateClusterName returns why name is not a valid member cluster name,
// or nil. Cluster names are DNS-1123 labels because they become a token of
// the stream subjects and of the cluster annotation.
func ValidateClusterName(name string) []string {
	return validation.IsDNS1123Label(name)
}

// InvalidError is the error form of a non-empty field.ErrorList. It is
// ErrInvalid under errors.Is; errors.As gives the API boundary every
// violation with its path, to answer 400 naming each offending field.
type InvalidError struct {
	Errs field.ErrorList
}

func (e *InvalidError) Error() string {
	return ErrInvalid.Error() + ": " + e.Errs.ToAggregate().Error()
}

func (e *InvalidError) Unwrap() error { return ErrInvalid }

// ToError returns nil for an empty list, otherwise an *InvalidError holding
// every violation.
func ToError(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return &InvalidError{Errs: errs}
}

func validateTypeMeta(tm metav1.TypeMeta) field.ErrorList {
	var errs field.ErrorList
	if tm.APIVersion != "" && tm.APIVersion != KarmadaAPIVersion && tm.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), tm.APIVersion, []string{KarmadaAPIVersion, APIVersion}))
	}
	if tm.Kind != "" && tm.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), tm.Kind, []string{Kind}))
	}
	return errs
}

func validateSpec(spec *ResourceRegistrySpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, ValidateClusterAffinity(&spec.TargetCluster, fldPath.Child("targetCluster"))...)

	selPath := fldPath.Child("resourceSelectors")
	if len(spec.ResourceSelectors) == 0 {
		errs = append(errs, field.Required(selPath, "at least one resource selector is required"))
	}
	for i, sel := range spec.ResourceSelectors {
		errs = append(errs, validateResourceSelector(sel, selPath.Index(i))...)
		if sel.IsWildcard() && spec.BackendStore != nil && spec.BackendStore.OpenSearch != nil {
			// A route to OpenSearch is stored per kind (and moves the
			// kind's objects when it changes); a pattern's kinds change
			// with each member's discovery.
			errs = append(errs, field.Forbidden(selPath.Index(i),
				"a wildcard selector's kinds are held in the default store; a registry with backendStore.openSearch names its kinds exactly"))
		}
	}

	errs = append(errs, validateBackendStore(spec.BackendStore, fldPath.Child("backendStore"))...)
	return errs
}

func validateFieldRequirement(expr corev1.NodeSelectorRequirement, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch expr.Key {
	case FieldProvider, FieldRegion, FieldZone:
	default:
		errs = append(errs, field.NotSupported(fldPath.Child("key"), expr.Key, []string{FieldProvider, FieldRegion, FieldZone}))
	}
	switch expr.Operator {
	case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
		if len(expr.Values) == 0 {
			errs = append(errs, field.Required(fldPath.Child("values"), "must be specified when operator is In or NotIn"))
		}
	default:
		errs = append(errs, field.NotSupported(fldPath.Child("operator"), expr.Operator,
			[]corev1.NodeSelectorOperator{corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn}))
	}
	return errs
}

func validateClusterNames(names []string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, name := range names {
		p := fldPath.Index(i)
		if name == "" {
			errs = append(errs, field.Required(p, "cluster name must not be empty"))
			continue
		}
		for _, msg := range ValidateClusterName(name) {
			errs = append(errs, field.Invalid(p, name, msg))
		}
	}
	return errs
}

func validateResourceSelector(sel ResourceSelector, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList

	avPath := fldPath.Child("apiVersion")
	switch group, isPattern := strings.CutSuffix(sel.APIVersion, "/"+Wildcard); {
	case sel.APIVersion == "":
		errs = append(errs, field.Required(avPath, `"v1" for the core group, otherwise "group/version"; or a wildcard, "group/*" or "*"`))
	case sel.APIVersion == Wildcard:
	case isPattern:
		if group != CoreGroupName {
			for _, msg := range validation.IsDNS1123Subdomain(group) {
				errs = append(errs, field.Invalid(avPath, sel.APIVersion, `group (spell the core group "core/*"): `+msg))
			}
		}
	default:
		errs = append(errs, validateGroupVersion(sel.APIVersion, avPath)...)
	}

	kindPath := fldPath.Child("kind")
	if sel.Kind == "" {
		errs = append(errs, field.Required(kindPath, `e.g. Deployment, or "*" for every kind`))
	} else if sel.Kind != Wildcard {
		errs = append(errs, validateKind(sel.Kind, kindPath)...)
	}

	if sel.Namespace != "" {
		for _, msg := range apivalidation.ValidateNamespaceName(sel.Namespace, false) {
			errs = append(errs, field.Invalid(fldPath.Child("namespace"), sel.Namespace, msg))
		}
	}
	for i, ns := range sel.Namespaces {
		p := fldPath.Child("namespaces").Index(i)
		if ns == "" {
			errs = append(errs, field.Required(p, "a namespace name"))
		}
		for _, msg := range nameMessages(ns, apivalidation.ValidateNamespaceName) {
			errs = append(errs, field.Invalid(p, ns, msg))
		}
	}

	if !sel.IsWildcard() {
		// Only a pattern has anything to leave out; on an exact selector
		// these would be silently meaningless.
		if len(sel.Exclude) > 0 {
			errs = append(errs, field.Invalid(fldPath.Child("exclude"), len(sel.Exclude), `applies only to a wildcard selector (kind "*", apiVersion "group/*" or "*")`))
		}
		if sel.CustomResources {
			errs = append(errs, field.Invalid(fldPath.Child("customResources"), true, `applies only to a wildcard selector (kind "*", apiVersion "group/*" or "*")`))
		}
		return errs
	}
	if group, every := sel.wildcardGroup(); sel.CustomResources && !every && IsBuiltinGroup(group) {
		errs = append(errs, field.Invalid(fldPath.Child("customResources"), true,
			fmt.Sprintf("apiVersion %q names a group Kubernetes builds in, which has no custom resources", sel.APIVersion)))
	}
	for i, x := range sel.Exclude {
		p := fldPath.Child("exclude").Index(i)
		if x.Group == "" && x.Kind == "" {
			errs = append(errs, field.Required(p, `a group ("core" for the core group), a kind, or both`))
		}
		if x.Group != "" && x.Group != CoreGroupName {
			for _, msg := range validation.IsDNS1123Subdomain(x.Group) {
				errs = append(errs, field.Invalid(p.Child("group"), x.Group, msg))
			}
		}
		if x.Kind != "" {
			errs = append(errs, validateKind(x.Kind, p.Child("kind"))...)
		}
	}
	return errs
}

// validateGroupVersion checks an exact apiVersion: "version" or
// "group/version".
func validateGroupVersion(apiVersion string, avPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	gv, err := schema.ParseGroupVersion(apiVersion)
	switch {
	case err != nil:
		errs = append(errs, field.Invalid(avPath, apiVersion, err.Error()))
	case gv.Version == "" || gv.String() != apiVersion:
		// ParseGroupVersion accepts "apps/" and "/v1"; neither names an API.
		errs = append(errs, field.Invalid(avPath, apiVersion, `must be "version" or "group/version"`))
	default:
		if gv.Group != "" {
			for _, msg := range validation.IsDNS1123Subdomain(gv.Group) {
				errs = append(errs, field.Invalid(avPath, apiVersion, "group: "+msg))
			}
		}
		for _, msg := range validation.IsDNS1035Label(gv.Version) {
			errs = append(errs, field.Invalid(avPath, apiVersion, "version: "+msg))
		}
	}
	return errs
}

// validateKind applies the rule CRDs apply to spec.names.kind, so every
// servable kind passes.
func validateKind(kind string, p *field.Path) field.ErrorList {
	if len(validation.IsDNS1035Label(strings.ToLower(kind))) > 0 {
		return field.ErrorList{field.Invalid(p, kind,
			"must be a kind such as Deployment: letters, digits and '-', starting with a letter, at most 63 characters")}
	}
	return nil
}

func validateBackendStore(store *BackendStoreConfig, fldPath *field.Path) field.ErrorList {
	if store == nil || store.OpenSearch == nil {
		return nil
	}
	var errs field.ErrorList
	osPath := fldPath.Child("openSearch")
	addrPath := osPath.Child("addresses")
	if len(store.OpenSearch.Addresses) == 0 {
		errs = append(errs, field.Required(addrPath, "at least one OpenSearch address is required"))
	}
	for i, addr := range store.OpenSearch.Addresses {
		errs = append(errs, validateOpenSearchAddress(addr, addrPath.Index(i))...)
	}

	// An empty secretRef is legal (connect without auth); a half-filled one
	// is a mistake that would otherwise also end up unauthenticated.
	ref := store.OpenSearch.SecretRef
	if ref != (SecretReference{}) {
		refPath := osPath.Child("secretRef")
		if ref.Name == "" {
			errs = append(errs, field.Required(refPath.Child("name"), "must be set when secretRef.namespace is set"))
		}
		for _, msg := range nameMessages(ref.Name, apivalidation.NameIsDNSSubdomain) {
			errs = append(errs, field.Invalid(refPath.Child("name"), ref.Name, msg))
		}
		if ref.Namespace == "" {
			errs = append(errs, field.Required(refPath.Child("namespace"), "must be set when secretRef.name is set"))
		}
		for _, msg := range nameMessages(ref.Namespace, apivalidation.ValidateNamespaceName) {
			errs = append(errs, field.Invalid(refPath.Child("namespace"), ref.Namespace, msg))
		}
	}
	return errs
}

func nameMessages(name string, fn apivalidation.ValidateNameFunc) []string {
	if name == "" {
		return nil
	}
	return fn(name, false)
}

func validateOpenSearchAddress(addr string, fldPath *field.Path) field.ErrorList {
	u, err := url.Parse(addr)
	if err != nil {
		// url.Error quotes the input, which may hold a password: report only
		// the reason, and the input only when it cannot carry userinfo.
		var reason error = err
		var ue *url.Error
		if errors.As(err, &ue) {
			reason = ue.Err
		}
		shown := addr
		if strings.Contains(addr, "@") {
			shown = "<redacted>"
		}
		return field.ErrorList{field.Invalid(fldPath, shown, reason.Error())}
	}
	var problems []string
	if u.Scheme != "http" && u.Scheme != "https" {
		problems = append(problems, `scheme must be "http" or "https"`)
	}
	if u.Hostname() == "" {
		problems = append(problems, "host must not be empty")
	}
	if u.User != nil {
		// Addresses surface in status, logs and error messages; credentials
		// belong in the Secret that secretRef names.
		problems = append(problems, "must not contain credentials (use secretRef)")
	}
	if len(problems) == 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(fldPath, u.Redacted(), strings.Join(problems, "; "))}
}
