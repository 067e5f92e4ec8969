package authz

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"

	"github.com/fleetview/fleetview/integration/harness"
	"github.com/fleetview/fleetview/internal/memberrbac"
)

// TestMemberRBACAgreement is the agreement test of issue #29: in three real
// member clusters (kube-apiserver --authorization-mode=RBAC) it generates an
// RBAC population (users, groups, service accounts; Roles and ClusterRoles
// with wildcards, resourceNames and subresources; RoleBindings to Roles and
// to ClusterRoles, some missing; aggregated ClusterRoles, nested, filled by
// upstream's aggregation controller run here against the member, and the
// bootstrap admin/edit/view), feeds memberrbac.Authorizer from client-go
// informers on the member's RBAC objects (Upsert on add and update, Delete
// on delete, as a stream delivers them), and requires each decision to be
// the member's own: SubjectAccessReviews for random (identity, verb,
// resource, namespace, name) cases, SelfSubjectAccessReviews with real
// service account tokens (the member's authenticator adds the implicit
// groups), and memberrbac's Scope against per-namespace reviews. Then it
// changes the population (bindings deleted and added, rules replaced,
// aggregation recomputed) and does it all again on the incrementally
// updated authorizers. 100% agreement; the counts are logged. Each run
// draws a new population from a seed it logs; FLEETVIEW_MEMBERRBAC_SEED=N
// replays one. TestMemberRBACPerClusterAgreement asks the same population
// through the hub: get, list and watch under /clusters/<member>/ in
// members that disagree (issue #43).
func TestMemberRBACAgreement(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FLEETVIEW_MEMBERRBAC_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("FLEETVIEW_MEMBERRBAC_SEED: %v", err)
		}
	}
	t.Logf("seed %d (FLEETVIEW_MEMBERRBAC_SEED=%d replays it)", seed, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	opts := harness.Options{Clusters: []string{"member1", "member2", "member3"}}
	if os.Getenv("FLEETVIEW_TEST_VERBOSE") != "" {
		opts.LogWriter = os.Stderr
	}
	start := time.Now()
	fleet, err := harness.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start member clusters: %v", err)
	}
	t.Cleanup(func() {
		if err := fleet.Stop(); err != nil {
			t.Errorf("stop member clusters: %v", err)
		}
	})
	t.Logf("3 members started in %v", time.Since(start).Round(time.Millisecond))

	var wg sync.WaitGroup
	results := make([]rbacAgreement, len(fleet.Clusters()))
	for i, c := range fleet.Clusters() {
		wg.Go(func() { results[i] = runRBACAgreement(ctx, t, c, seed+uint64(i)) })
	}
	wg.Wait()
	var total rbacAgreement
	for i, r := range results {
		t.Logf("%s: %s", fleet.Clusters()[i].Name, r)
		total.add(r)
	}
	t.Logf("all members: %s", total)
	if total.sar < 10000 {
		t.Errorf("%d SubjectAccessReview cases, want at least 10,000", total.sar)
	}
	if total.mismatches != 0 {
		t.Errorf("%d disagreements", total.mismatches)
	}
}

// rbacAgreement counts one member's cases.
type rbacAgreement struct {
	sar, sarAllowed, ssar, ssarAllowed, scope, scopeAllowed int
	mismatches                                              int
	aggregated, aggregatedRules                             int // at the end
	objects                                                 memberrbac.Counts
	sarTime                                                 time.Duration // per member, summed
}

func (r *rbacAgreement) add(o rbacAgreement) {
	r.sar += o.sar
	r.sarAllowed += o.sarAllowed
	r.ssar += o.ssar
	r.ssarAllowed += o.ssarAllowed
	r.scope += o.scope
	r.scopeAllowed += o.scopeAllowed
	r.mismatches += o.mismatches
	r.objects.ClusterRoles += o.objects.ClusterRoles
	r.objects.ClusterRoleBindings += o.objects.ClusterRoleBindings
	r.objects.Roles += o.objects.Roles
	r.objects.RoleBindings += o.objects.RoleBindings
	r.sarTime += o.sarTime
	r.aggregated += o.aggregated
	r.aggregatedRules += o.aggregatedRules
}

func (r rbacAgreement) String() string {
	return fmt.Sprintf("SubjectAccessReview %d cases (%d allowed) in %v, SelfSubjectAccessReview with service account tokens %d (%d allowed), "+
		"Scope per namespace %d (%d allowed), disagreements %d; RBAC objects at the end %+v, %d aggregated ClusterRoles holding %d rules",
		r.sar, r.sarAllowed, r.sarTime.Round(time.Millisecond), r.ssar, r.ssarAllowed, r.scope, r.scopeAllowed, r.mismatches, r.objects,
		r.aggregated, r.aggregatedRules)
}

// The population's vocabulary.
var (
	rbacNamespaces = []string{"ns0", "ns1", "ns2", "ns3", "ns4", "ns5"}
	rbacSAs        = []string{"sa-a", "sa-b"} // in ns0..ns2
	rbacUsers      = []string{"alice", "bob", "carol", "dave", "erin", "system:serviceaccount:ns0:sa-a"}
	rbacGroups     = []string{"g-dev", "g-ops", "g-audit", "system:authenticated", "system:serviceaccounts", "system:serviceaccounts:ns1"}
	rbacVerbs      = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	rbacAPIGroups  = []string{"", "apps", "batch", "*"}
	rbacResources  = []string{"pods", "pods/log", "pods/status", "secrets", "configmaps", "deployments", "deployments/scale", "jobs", "*", "*/status", "*/scale", "pods/*"}
	rbacNames      = []string{"x", "y"}
	// what the cases ask about (group, resource, subresource)
	rbacAsk = [][3]string{
		{"", "pods", ""}, {"", "pods", "log"}, {"", "pods", "status"}, {"", "pods", "exec"}, {"", "secrets", ""}, {"", "configmaps", ""},
		{"apps", "deployments", ""}, {"apps", "deployments", "scale"}, {"apps", "deployments", "status"}, {"batch", "jobs", ""},
		{"", "namespaces", ""}, {"", "nodes", ""}, {"rbac.authorization.k8s.io", "roles", ""}, {"example.com", "widgets", ""},
		{"", "serviceaccounts", "token"}, {"authorization.k8s.io", "selfsubjectaccessreviews", ""},
	}
	rbacAskVerbs = append(slices.Clone(rbacVerbs), "escalate", "bind", "impersonate")
)

const (
	rbacAggLabel    = "fleetview.io/aggregate-to-test"
	rbacNestedLabel = "fleetview.io/aggregate-to-nested"
)

type rbacGen struct{ rng *rand.Rand }

func (g rbacGen) pick(s []string) string { return s[g.rng.IntN(len(s))] }

func (g rbacGen) some(s []string, max int) []string {
	out := []string{}
	for range 1 + g.rng.IntN(max) {
		if v := g.pick(s); !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func (g rbacGen) rules() []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, 1+g.rng.IntN(3))
	for i := range out {
		r := rbacv1.PolicyRule{APIGroups: g.some(rbacAPIGroups, 2), Resources: g.some(rbacResources, 3)}
		if g.rng.IntN(6) == 0 {
			r.Verbs = []string{"*"}
		} else {
			r.Verbs = g.some(rbacVerbs, 3)
		}
		if g.rng.IntN(4) == 0 {
			r.ResourceNames = g.some(rbacNames, 2)
		}
		out[i] = r
	}
	return out
}

func (g rbacGen) subjects() []rbacv1.Subject {
	out := make([]rbacv1.Subject, 1+g.rng.IntN(3))
	for i := range out {
		switch g.rng.IntN(3) {
		case 0:
			out[i] = rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: g.pick(rbacUsers)}
		case 1:
			out[i] = rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: g.pick(rbacGroups)}
		default:
			out[i] = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: g.pick(rbacNamespaces[:3]), Name: g.pick(rbacSAs)}
		}
	}
	return out
}

// identity is a random caller as the member's authenticator presents it.
func (g rbacGen) identity() memberrbac.Identity {
	switch g.rng.IntN(10) {
	case 0, 1, 2:
		return memberrbac.ServiceAccount(g.pick(rbacNamespaces[:3]), g.pick(rbacSAs))
	case 3:
		return memberrbac.Identity{User: "system:anonymous", Groups: []string{"system:unauthenticated"}}
	case 4:
		if g.rng.IntN(4) == 0 {
			return memberrbac.Authenticated(memberrbac.Identity{User: "root", Groups: []string{"system:masters"}})
		}
	}
	id := memberrbac.Identity{User: g.pick(rbacUsers)}
	if g.rng.IntN(3) > 0 {
		id.Groups = g.some(rbacGroups[:3], 2)
	}
	return memberrbac.Authenticated(id)
}

func (g rbacGen) request() memberrbac.Request {
	a := rbacAsk[g.rng.IntN(len(rbacAsk))]
	req := memberrbac.Request{Verb: g.pick(rbacAskVerbs), APIGroup: a[0], Resource: a[1], Subresource: a[2]}
	if n := g.rng.IntN(8); n < 6 {
		req.Namespace = rbacNamespaces[n]
	} else if n == 6 {
		req.Namespace = "absent"
	}
	if g.rng.IntN(2) == 0 {
		req.Name = g.pick(append(slices.Clone(rbacNames), "z"))
	}
	return req
}

// runRBACAgreement runs both phases on one member.
func runRBACAgreement(ctx context.Context, t *testing.T, c *harness.Cluster, seed uint64) (res rbacAgreement) {
	g := rbacGen{rng: rand.New(rand.NewPCG(seed, 29))}
	cs := c.Clientset()
	fail := func(format string, args ...any) rbacAgreement {
		t.Errorf("%s: "+format, append([]any{c.Name}, args...)...)
		res.mismatches++
		return res
	}

	// The member's aggregation controller: upstream's, run here (the
	// harness runs no controller manager).
	ctrlCtx, stopCtrl := context.WithCancel(ctx)
	defer stopCtrl()
	ctrlInformers := informers.NewSharedInformerFactory(cs, 0)
	aggregator := clusterroleaggregation.NewClusterRoleAggregation(ctrlInformers.Rbac().V1().ClusterRoles(), cs.RbacV1())
	ctrlInformers.Start(ctrlCtx.Done())
	var ctrlDone sync.WaitGroup
	ctrlDone.Go(func() { aggregator.Run(ctrlCtx, 1) })
	defer func() { stopCtrl(); ctrlDone.Wait(); ctrlInformers.Shutdown() }()

	// fleetview's side: an Authorizer fed by informers, as a stream would.
	az := memberrbac.New()
	feedInformers := informers.NewSharedInformerFactory(cs, 0)
	feed := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { rbacFeed(t, az.Upsert, o) },
		UpdateFunc: func(_, o any) { rbacFeed(t, az.Upsert, o) },
		DeleteFunc: func(o any) {
			if tomb, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = tomb.Obj
			}
			rbacFeed(t, az.Delete, o)
		},
	}
	for _, inf := range []cache.SharedIndexInformer{
		feedInformers.Rbac().V1().ClusterRoles().Informer(), feedInformers.Rbac().V1().ClusterRoleBindings().Informer(),
		feedInformers.Rbac().V1().Roles().Informer(), feedInformers.Rbac().V1().RoleBindings().Informer(),
	} {
		if _, err := inf.AddEventHandler(feed); err != nil {
			return fail("event handler: %v", err)
		}
	}
	feedCtx, stopFeed := context.WithCancel(ctx)
	defer func() { stopFeed(); feedInformers.Shutdown() }()
	feedInformers.Start(feedCtx.Done())

	if err := rbacPopulate(ctx, cs, g); err != nil {
		return fail("populate: %v", err)
	}
	for phase := 1; phase <= 2; phase++ {
		if phase == 2 {
			if err := rbacChurn(ctx, cs, g); err != nil {
				return fail("churn: %v", err)
			}
		}
		if err := rbacSettle(ctx, cs, az, phase); err != nil {
			return fail("phase %d: %v", phase, err)
		}
		if err := rbacCompare(ctx, t, c, az, g, 2000, &res); err != nil {
			return fail("phase %d: %v", phase, err)
		}
		// Nothing changed under the cases: the aggregation was still at its
		// fixed point.
		n, rules, err := rbacAggregated(ctx, cs)
		if err != nil {
			return fail("phase %d: aggregation moved during the cases: %v", phase, err)
		}
		res.aggregated, res.aggregatedRules = n, rules
	}
	res.objects = az.Counts()
	return res
}

func rbacFeed(t *testing.T, f func(any) error, o any) {
	if err := f(o); err != nil {
		t.Errorf("feed %T: %v", o, err)
	}
}

// rbacPopulate creates the namespaces, service accounts and RBAC objects.
func rbacPopulate(ctx context.Context, cs kubernetes.Interface, g rbacGen) error {
	create := metav1.CreateOptions{}
	for i, ns := range rbacNamespaces {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, create); err != nil {
			return err
		}
		if i < 3 {
			for _, sa := range rbacSAs {
				if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, create); err != nil {
					return err
				}
			}
		}
	}
	rbac := cs.RbacV1()
	for i := range 12 {
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cr%d", i)}, Rules: g.rules()}
		if i < 6 && g.rng.IntN(2) == 0 {
			cr.Labels = map[string]string{rbacAggLabel: "true"}
		}
		if i == 6 {
			cr.Labels = map[string]string{rbacNestedLabel: "true"}
		}
		if _, err := rbac.ClusterRoles().Create(ctx, cr, create); err != nil {
			return err
		}
	}
	// agg-test aggregates the labelled cr*; agg-nested aggregates agg-test
	// (labelled) and cr6: the controller's fixed point takes two rounds.
	for _, cr := range []*rbacv1.ClusterRole{
		{
			ObjectMeta:      metav1.ObjectMeta{Name: "agg-test", Labels: map[string]string{rbacNestedLabel: "true"}},
			AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{rbacAggLabel: "true"}}}},
		},
		{
			ObjectMeta:      metav1.ObjectMeta{Name: "agg-nested"},
			AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{rbacNestedLabel: "true"}}}},
		},
	} {
		if _, err := rbac.ClusterRoles().Create(ctx, cr, create); err != nil {
			return err
		}
	}
	clusterRoles := []string{"cr0", "cr1", "cr2", "cr3", "cr4", "cr5", "cr6", "cr7", "cr8", "cr9", "cr10", "cr11", "agg-test", "agg-nested", "view", "edit", "admin", "no-such-clusterrole"}
	for i := range 8 {
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("crb%d", i)},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: g.pick(clusterRoles)},
			Subjects:   g.subjects(),
		}
		if _, err := rbac.ClusterRoleBindings().Create(ctx, b, create); err != nil {
			return err
		}
	}
	for _, ns := range rbacNamespaces {
		for i := range 2 {
			r := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("role%d", i)}, Rules: g.rules()}
			if _, err := rbac.Roles(ns).Create(ctx, r, create); err != nil {
				return err
			}
		}
		for i := range 5 {
			if err := rbacCreateRoleBinding(ctx, cs, g, ns, fmt.Sprintf("rb%d", i), clusterRoles); err != nil {
				return err
			}
		}
	}
	return nil
}

func rbacCreateRoleBinding(ctx context.Context, cs kubernetes.Interface, g rbacGen, ns, name string, clusterRoles []string) error {
	b := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: g.subjects()}
	if g.rng.IntN(2) == 0 {
		b.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: g.pick([]string{"role0", "role1", "no-such-role"})}
	} else {
		b.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: g.pick(clusterRoles)}
	}
	if g.rng.IntN(4) == 0 { // a service account of the binding's own namespace
		b.Subjects = append(b.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: g.pick(rbacSAs)})
	}
	_, err := cs.RbacV1().RoleBindings(ns).Create(ctx, b, metav1.CreateOptions{})
	return err
}

// rbacChurn changes the population: bindings deleted and added, rules
// replaced (an aggregated source among them), a label moved.
func rbacChurn(ctx context.Context, cs kubernetes.Interface, g rbacGen) error {
	rbac := cs.RbacV1()
	for _, ns := range rbacNamespaces {
		for i := range 5 {
			if g.rng.IntN(3) == 0 {
				if err := rbac.RoleBindings(ns).Delete(ctx, fmt.Sprintf("rb%d", i), metav1.DeleteOptions{}); err != nil {
					return err
				}
			}
		}
		if err := rbacCreateRoleBinding(ctx, cs, g, ns, "rb-new", []string{"cr0", "cr7", "agg-nested", "view"}); err != nil {
			return err
		}
		r, err := rbac.Roles(ns).Get(ctx, "role0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		r.Rules = g.rules()
		if _, err := rbac.Roles(ns).Update(ctx, r, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	for _, name := range []string{"crb0", "crb1"} {
		if err := rbac.ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	for _, name := range []string{"cr0", "cr1", "cr6", "cr8"} {
		cr, err := rbac.ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cr.Rules = g.rules()
		if name == "cr1" { // moves in or out of agg-test
			if cr.Labels[rbacAggLabel] == "true" {
				cr.Labels = nil
			} else {
				cr.Labels = map[string]string{rbacAggLabel: "true"}
			}
		}
		if _, err := rbac.ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	b := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "crb-new"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "agg-test"},
		Subjects:   g.subjects(),
	}
	_, err := rbac.ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{})
	return err
}

// rbacAggregated checks that every aggregated ClusterRole holds what
// upstream's controller computes from the others (its syncClusterRole: per
// selector, the matching roles by name, each rule once), i.e. that the
// controller has nothing left to write.
// It returns how many aggregated ClusterRoles there are and their rules.
func rbacAggregated(ctx context.Context, cs kubernetes.Interface) (aggregated, rules int, _ error) {
	list, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, err
	}
	roles := list.Items
	sort.Slice(roles, func(i, j int) bool { return roles[i].Name < roles[j].Name })
	for _, cr := range roles {
		if cr.AggregationRule == nil {
			continue
		}
		want := []rbacv1.PolicyRule{}
		for _, sel := range cr.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				return 0, 0, err
			}
			for _, other := range roles {
				if other.Name == cr.Name || !s.Matches(k8slabels.Set(other.Labels)) {
					continue
				}
				for _, r := range other.Rules {
					if !slices.ContainsFunc(want, func(w rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(w, r) }) {
						want = append(want, r)
					}
				}
			}
		}
		if !equality.Semantic.DeepEqual(want, cr.Rules) {
			return 0, 0, fmt.Errorf("ClusterRole %s: %d rules, aggregation makes %d", cr.Name, len(cr.Rules), len(want))
		}
		aggregated++
		rules += len(cr.Rules)
	}
	return aggregated, rules, nil
}

// rbacSettle waits until the aggregation is done, then until both the
// member's authorizer and az have seen every object: a marker of each kind,
// created after all others of its kind (each kind's informer delivers in
// order), must be effective on both sides.
func rbacSettle(ctx context.Context, cs kubernetes.Interface, az *memberrbac.Authorizer, phase int) error {
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, _, err := rbacAggregated(ctx, cs)
		return err == nil, nil
	}); err != nil {
		_, _, why := rbacAggregated(ctx, cs)
		return fmt.Errorf("aggregation not settled: %v (%w)", why, err)
	}
	name := fmt.Sprintf("marker-%d", phase)
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}}
	rbac := cs.RbacV1()
	create := metav1.CreateOptions{}
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{"fleetview.test"}, Resources: []string{"markers"}}}}, create); err != nil {
		return err
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}, create); err != nil {
		return err
	}
	if _, err := rbac.Roles("ns0").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"list"}, APIGroups: []string{"fleetview.test"}, Resources: []string{"markers"}}}}, create); err != nil {
		return err
	}
	if _, err := rbac.RoleBindings("ns0").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}}, create); err != nil {
		return err
	}
	id := memberrbac.Identity{User: name}
	reqs := []memberrbac.Request{
		{Verb: "get", APIGroup: "fleetview.test", Resource: "markers"},
		{Verb: "list", APIGroup: "fleetview.test", Resource: "markers", Namespace: "ns0"},
	}
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, req := range reqs {
			if ok, _ := az.Authorize(ctx, id, req); !ok {
				return false, nil
			}
			ok, err := rbacSAR(ctx, cs, id, req)
			if err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	})
}

func rbacSAR(ctx context.Context, cs kubernetes.Interface, id memberrbac.Identity, req memberrbac.Request) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: id.User, Groups: id.Groups, ResourceAttributes: rbacAttributes(req),
	}}
	res, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return res.Status.Allowed, nil
}

func rbacAttributes(req memberrbac.Request) *authorizationv1.ResourceAttributes {
	return &authorizationv1.ResourceAttributes{Namespace: req.Namespace, Verb: req.Verb, Group: req.APIGroup,
		Resource: req.Resource, Subresource: req.Subresource, Name: req.Name}
}

// rbacCompare runs n random SubjectAccessReview cases, the service accounts'
// SelfSubjectAccessReviews and Scope checks, and counts them into res.
func rbacCompare(ctx context.Context, t *testing.T, c *harness.Cluster, az *memberrbac.Authorizer, g rbacGen, n int, res *rbacAgreement) error {
	cs := c.Clientset()
	type kase struct {
		id  memberrbac.Identity
		req memberrbac.Request
	}
	cases := make([]kase, n)
	for i := range cases {
		cases[i] = kase{g.identity(), g.request()}
	}
	var allowed, mismatches atomic.Int64
	var firstErr error
	var errOnce sync.Once
	check := func(id memberrbac.Identity, req memberrbac.Request, member bool, via string) {
		ours, reason := az.Authorize(ctx, id, req)
		if member {
			allowed.Add(1)
		}
		if ours != member {
			if mismatches.Add(1) <= 10 {
				t.Errorf("%s: %s %+v %+v: member %v, memberrbac %v (%s)", c.Name, via, id, req, member, ours, reason)
			}
		}
	}
	work := make(chan kase)
	var wg sync.WaitGroup
	begin := time.Now()
	for range 8 {
		wg.Go(func() {
			for k := range work {
				ok, err := rbacSAR(ctx, cs, k.id, k.req)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					continue
				}
				check(k.id, k.req, ok, "SubjectAccessReview")
			}
		})
	}
	for _, k := range cases {
		work <- k
	}
	close(work)
	wg.Wait()
	res.sarTime += time.Since(begin)
	if firstErr != nil {
		return firstErr
	}
	res.sar += n
	res.sarAllowed += int(allowed.Load())
	res.mismatches += int(mismatches.Load())

	// Real service account tokens: the member's authenticator supplies the
	// user and its implicit groups; memberrbac.ServiceAccount must match.
	allowed.Store(0)
	mismatches.Store(0)
	for _, ns := range rbacNamespaces[:3] {
		for _, sa := range rbacSAs {
			tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("token of %s/%s: %w", ns, sa, err)
			}
			cfg := c.AdminRESTConfig()
			cfg.BearerToken = tr.Status.Token
			sacs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			id := memberrbac.ServiceAccount(ns, sa)
			for range 40 {
				req := g.request()
				ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: rbacAttributes(req)}}
				r, err := sacs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, ssar, metav1.CreateOptions{})
				if err != nil {
					return fmt.Errorf("SelfSubjectAccessReview as %s/%s: %w", ns, sa, err)
				}
				check(id, req, r.Status.Allowed, "SelfSubjectAccessReview")
				res.ssar++
			}
		}
	}
	res.ssarAllowed += int(allowed.Load())
	res.mismatches += int(mismatches.Load())

	// Scope: where a list (or watch) is allowed, against the member's
	// answer in each namespace and cluster-wide.
	allowed.Store(0)
	mismatches.Store(0)
	for range 40 {
		id := g.identity()
		a := rbacAsk[g.rng.IntN(len(rbacAsk))]
		verb := g.pick([]string{"list", "watch"})
		scope := az.Scope(ctx, id, verb, memberrbac.Resource{APIGroup: a[0], Resource: a[1], Subresource: a[2]})
		for _, ns := range append(slices.Clone(rbacNamespaces), "", "absent") {
			req := memberrbac.Request{Verb: verb, APIGroup: a[0], Resource: a[1], Subresource: a[2], Namespace: ns}
			member, err := rbacSAR(ctx, cs, id, req)
			if err != nil {
				return err
			}
			if member {
				allowed.Add(1)
			}
			if scope.Allows(ns) != member {
				if mismatches.Add(1) <= 10 {
					t.Errorf("%s: Scope %+v for %+v %s %v: Allows(%q) = %v, member %v", c.Name, scope, id, verb, a, ns, scope.Allows(ns), member)
				}
			}
			res.scope++
		}
	}
	res.scopeAllowed += int(allowed.Load())
	res.mismatches += int(mismatches.Load())
	return nil
}
