// Command demo-fleet starts real member clusters (etcd + kube-apiserver each,
// through integration/harness), fills them with sample workloads, writes a
// kubeconfig with one context per cluster, and runs until interrupted. It is
// the member-cluster half of scripts/demo.sh.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/integration/harness"
)

func main() {
	clusters := flag.String("clusters", "member1,member2,member3", "member cluster names")
	kubeconfig := flag.String("kubeconfig", "demo-kubeconfig", "where to write the kubeconfig (collector user)")
	adminKubeconfig := flag.String("admin-kubeconfig", "demo-admin-kubeconfig", "where to write the admin kubeconfig")
	pods := flag.Int("pods", 20, "sample Pods per cluster")
	flag.Parse()
	if err := run(*clusters, *kubeconfig, *adminKubeconfig, *pods); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(clusters, kubeconfig, adminKubeconfig string, pods int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	fmt.Println("starting member clusters (first run builds kube-apiserver and etcd: a few minutes)...")
	fleet, err := harness.Start(sctx, harness.Options{Clusters: strings.Split(clusters, ",")})
	if err != nil {
		return err
	}
	defer func() { _ = fleet.Stop() }()
	for _, c := range fleet.Clusters() {
		if err := c.GrantCollectorReadAll(sctx); err != nil {
			return err
		}
		if err := populate(sctx, c, pods); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	if err := fleet.WriteKubeconfig(kubeconfig, "collector"); err != nil {
		return err
	}
	if err := fleet.WriteKubeconfig(adminKubeconfig, "admin"); err != nil {
		return err
	}
	fmt.Printf("ready: kubeconfig %s (collector), %s (admin)\n", kubeconfig, adminKubeconfig)
	<-ctx.Done()
	fmt.Println("stopping member clusters")
	return nil
}

func populate(ctx context.Context, c *harness.Cluster, pods int) error {
	cs := c.Clientset()
	for _, ns := range []string{"shop", "payments"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	tmpl := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: app, Image: "registry.example/" + app + ":1.0"}}}}
	}
	for i := 0; i < pods; i++ {
		app := []string{"frontend", "cart", "checkout"}[i%3]
		ns := "shop"
		if app == "checkout" {
			ns = "payments"
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", app, i), Labels: map[string]string{"app": app, "tier": "web"}}, Spec: tmpl(app).Spec}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for _, app := range []string{"frontend", "cart"} {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: app, Labels: map[string]string{"app": app}},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}, Template: tmpl(app)}}
		if _, err := cs.AppsV1().Deployments("shop").Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "node-exporter"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "node-exporter"}}, Template: tmpl("node-exporter")}}
	_, err := cs.AppsV1().DaemonSets("kube-system").Create(ctx, ds, metav1.CreateOptions{})
	return err
}
