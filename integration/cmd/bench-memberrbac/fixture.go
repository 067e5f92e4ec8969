package main

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/integration/harness"
)

// The fixture's subjects and objects, the same in every member.
const (
	restricted   = "alice" // a RoleBinding in each granted namespace
	unrestricted = "bob"   // one ClusterRoleBinding
	podReader    = "fv-bench-pod-reader"
	bindingName  = "alice-pods"
	// hiddenNamespaces hold the Pods alice is not granted.
	hiddenNamespaces = 10
)

func grantedNS(i int) string { return fmt.Sprintf("ns-%04d", i) }
func hiddenNS(i int) string  { return fmt.Sprintf("hidden-%02d", i) }
func podName(i int) string   { return fmt.Sprintf("pod-%07d", i) }

// podNamespace is where Pod i of a member lives: the first cfg.pods in the
// granted namespaces, round robin, the rest (cfg.hidden) in the hidden
// ones.
func podNamespace(cfg config, i int) string {
	if i < cfg.pods {
		return grantedNS(i % cfg.namespaces)
	}
	return hiddenNS((i - cfg.pods) % hiddenNamespaces)
}

func pod(cfg config, i int) *corev1.Pod {
	app := []string{"web", "api", "worker", "cache"}[i%4]
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace(cfg, i), Name: podName(i),
			Labels:      map[string]string{"app": app, "tier": []string{"frontend", "backend"}[i%2]},
			Annotations: map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%03d", i%200), ServiceAccountName: app,
			Containers: []corev1.Container{{Name: app, Image: "registry.example.com/" + app + ":1.2.3",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
				Env:   []corev1.EnvVar{{Name: "APP_ENV", Value: "production"}}}}},
	}
	harness.DefaultPod(p)
	return p
}

// aliceBinding grants alice the pod reader in ns.
func aliceBinding(ns string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: bindingName},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: podReader},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: restricted}}}
}

// populate writes one member's fixture: the namespaces, the pod reader
// ClusterRole, bob's ClusterRoleBinding, alice's RoleBindings (through the
// apiserver, which validates them) and the Pods (straight into etcd).
func populate(ctx context.Context, c *harness.Cluster, cfg config) error {
	if err := c.GrantCollectorReadAll(ctx); err != nil {
		return err
	}
	cs := c.Clientset()
	var nss []string
	for i := range cfg.namespaces {
		nss = append(nss, grantedNS(i))
	}
	for i := range hiddenNamespaces {
		nss = append(nss, hiddenNS(i))
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, ns := range nss {
		g.Go(func() error {
			_, err := cs.CoreV1().Namespaces().Create(gctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("%s: namespaces: %w", c.Name, err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: podReader},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("%s: ClusterRole: %w", c.Name, err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bob-pods"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: podReader},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: unrestricted}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("%s: ClusterRoleBinding: %w", c.Name, err)
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range cfg.namespaces {
		g.Go(func() error {
			_, err := cs.RbacV1().RoleBindings(grantedNS(i)).Create(gctx, aliceBinding(grantedNS(i)), metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("%s: RoleBindings: %w", c.Name, err)
	}
	return c.StorePods(ctx, cfg.pods+cfg.hidden, 2, func(i int) (*corev1.Pod, error) { return pod(cfg, i), nil })
}

// expected is the set of cluster/namespace/name every list must hold:
// alice's (the granted namespaces) and everyone's.
func expected(cfg config, clusters []string) (alice, all map[string]bool) {
	alice, all = map[string]bool{}, map[string]bool{}
	for _, c := range clusters {
		for i := range cfg.pods + cfg.hidden {
			k := c + "/" + podNamespace(cfg, i) + "/" + podName(i)
			all[k] = true
			if i < cfg.pods {
				alice[k] = true
			}
		}
	}
	return alice, all
}
