package catalog

import "k8s.io/apimachinery/pkg/runtime/schema"

// builtin is what the hub itself knows of one of Kubernetes' own
// resources: its kind and scope (the same in every cluster, since they are
// compiled into every kube-apiserver), and the short names and categories
// a kube-apiserver's discovery reports. TestBuiltinKindsAreClientGos checks
// each kind against client-go's scheme, and the integration test
// TestBuiltinTableMatchesKubeAPIServer checks the table against a real
// kube-apiserver's discovery.
type builtin struct {
	kind       string
	namespaced bool
	short      []string
	categories []string
}

// categoryAll is the category `kubectl get all` expands.
var categoryAll = []string{"all"}

// categoryAPIExtensions is the category of the resources that extend the
// API (kubectl get api-extensions).
var categoryAPIExtensions = []string{"api-extensions"}

// builtins are keyed by group and resource: a built-in resource's kind and
// scope do not change between its versions.
var builtins = map[schema.GroupResource]builtin{
	{Resource: "pods"}:                   {kind: "Pod", namespaced: true, short: []string{"po"}, categories: categoryAll},
	{Resource: "services"}:               {kind: "Service", namespaced: true, short: []string{"svc"}, categories: categoryAll},
	{Resource: "replicationcontrollers"}: {kind: "ReplicationController", namespaced: true, short: []string{"rc"}, categories: categoryAll},
	{Resource: "configmaps"}:             {kind: "ConfigMap", namespaced: true, short: []string{"cm"}},
	{Resource: "secrets"}:                {kind: "Secret", namespaced: true},
	{Resource: "namespaces"}:             {kind: "Namespace", short: []string{"ns"}},
	{Resource: "nodes"}:                  {kind: "Node", short: []string{"no"}},
	{Resource: "endpoints"}:              {kind: "Endpoints", namespaced: true, short: []string{"ep"}},
	{Resource: "events"}:                 {kind: "Event", namespaced: true, short: []string{"ev"}},
	{Resource: "serviceaccounts"}:        {kind: "ServiceAccount", namespaced: true, short: []string{"sa"}},
	{Resource: "persistentvolumes"}:      {kind: "PersistentVolume", short: []string{"pv"}},
	{Resource: "persistentvolumeclaims"}: {kind: "PersistentVolumeClaim", namespaced: true, short: []string{"pvc"}},
	{Resource: "resourcequotas"}:         {kind: "ResourceQuota", namespaced: true, short: []string{"quota"}},
	{Resource: "limitranges"}:            {kind: "LimitRange", namespaced: true, short: []string{"limits"}},
	{Resource: "podtemplates"}:           {kind: "PodTemplate", namespaced: true},

	{Group: "apps", Resource: "deployments"}:         {kind: "Deployment", namespaced: true, short: []string{"deploy"}, categories: categoryAll},
	{Group: "apps", Resource: "replicasets"}:         {kind: "ReplicaSet", namespaced: true, short: []string{"rs"}, categories: categoryAll},
	{Group: "apps", Resource: "daemonsets"}:          {kind: "DaemonSet", namespaced: true, short: []string{"ds"}, categories: categoryAll},
	{Group: "apps", Resource: "statefulsets"}:        {kind: "StatefulSet", namespaced: true, short: []string{"sts"}, categories: categoryAll},
	{Group: "apps", Resource: "controllerrevisions"}: {kind: "ControllerRevision", namespaced: true},

	{Group: "batch", Resource: "cronjobs"}: {kind: "CronJob", namespaced: true, short: []string{"cj"}, categories: categoryAll},
	{Group: "batch", Resource: "jobs"}:     {kind: "Job", namespaced: true, categories: categoryAll},

	{Group: "autoscaling", Resource: "horizontalpodautoscalers"}: {kind: "HorizontalPodAutoscaler", namespaced: true, short: []string{"hpa"}, categories: categoryAll},

	{Group: "networking.k8s.io", Resource: "ingresses"}:       {kind: "Ingress", namespaced: true, short: []string{"ing"}},
	{Group: "networking.k8s.io", Resource: "ingressclasses"}:  {kind: "IngressClass"},
	{Group: "networking.k8s.io", Resource: "networkpolicies"}: {kind: "NetworkPolicy", namespaced: true, short: []string{"netpol"}},
	{Group: "networking.k8s.io", Resource: "ipaddresses"}:     {kind: "IPAddress", short: []string{"ip"}},
	{Group: "networking.k8s.io", Resource: "servicecidrs"}:    {kind: "ServiceCIDR"},

	{Group: "discovery.k8s.io", Resource: "endpointslices"}:   {kind: "EndpointSlice", namespaced: true},
	{Group: "coordination.k8s.io", Resource: "leases"}:        {kind: "Lease", namespaced: true},
	{Group: "events.k8s.io", Resource: "events"}:              {kind: "Event", namespaced: true, short: []string{"ev"}},
	{Group: "policy", Resource: "poddisruptionbudgets"}:       {kind: "PodDisruptionBudget", namespaced: true, short: []string{"pdb"}},
	{Group: "node.k8s.io", Resource: "runtimeclasses"}:        {kind: "RuntimeClass"},
	{Group: "scheduling.k8s.io", Resource: "priorityclasses"}: {kind: "PriorityClass", short: []string{"pc"}},

	{Group: "rbac.authorization.k8s.io", Resource: "roles"}:               {kind: "Role", namespaced: true},
	{Group: "rbac.authorization.k8s.io", Resource: "rolebindings"}:        {kind: "RoleBinding", namespaced: true},
	{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}:        {kind: "ClusterRole"},
	{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}: {kind: "ClusterRoleBinding"},

	{Group: "storage.k8s.io", Resource: "storageclasses"}:          {kind: "StorageClass", short: []string{"sc"}},
	{Group: "storage.k8s.io", Resource: "volumeattributesclasses"}: {kind: "VolumeAttributesClass", short: []string{"vac"}},
	{Group: "storage.k8s.io", Resource: "volumeattachments"}:       {kind: "VolumeAttachment"},
	{Group: "storage.k8s.io", Resource: "csidrivers"}:              {kind: "CSIDriver"},
	{Group: "storage.k8s.io", Resource: "csinodes"}:                {kind: "CSINode"},
	{Group: "storage.k8s.io", Resource: "csistoragecapacities"}:    {kind: "CSIStorageCapacity", namespaced: true},

	{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}: {kind: "CertificateSigningRequest", short: []string{"csr"}},

	{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}:     {kind: "MutatingWebhookConfiguration", categories: categoryAPIExtensions},
	{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}:   {kind: "ValidatingWebhookConfiguration", categories: categoryAPIExtensions},
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}:       {kind: "ValidatingAdmissionPolicy", categories: categoryAPIExtensions},
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings"}: {kind: "ValidatingAdmissionPolicyBinding", categories: categoryAPIExtensions},

	{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}: {kind: "CustomResourceDefinition", short: []string{"crd", "crds"}, categories: categoryAPIExtensions},
	{Group: "apiregistration.k8s.io", Resource: "apiservices"}:             {kind: "APIService", categories: categoryAPIExtensions},

	{Group: "flowcontrol.apiserver.k8s.io", Resource: "flowschemas"}:                 {kind: "FlowSchema"},
	{Group: "flowcontrol.apiserver.k8s.io", Resource: "prioritylevelconfigurations"}: {kind: "PriorityLevelConfiguration"},
}

// builtinNames is every name a built-in resource answers to on the command
// line (plural, singular, short names): a custom resource's short name
// must not hijack one of them.
func builtinNames() map[string]bool {
	out := map[string]bool{}
	for gr, b := range builtins {
		out[gr.Resource] = true
		out[lower(b.kind)] = true
		for _, s := range b.short {
			out[s] = true
		}
	}
	return out
}

// BuiltinResources are the built-in resources the hub knows, for tests
// that check the table against a kube-apiserver.
func BuiltinResources() []schema.GroupResource {
	out := make([]schema.GroupResource, 0, len(builtins))
	for gr := range builtins {
		out = append(out, gr)
	}
	return out
}

// Builtin is what the hub knows of a built-in resource.
func Builtin(gr schema.GroupResource) (kind string, namespaced bool, short, categories []string, ok bool) {
	b, ok := builtins[gr]
	return b.kind, b.namespaced, b.short, b.categories, ok
}
