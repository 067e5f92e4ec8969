package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/integration/harness"
)

// namespace holds every object the fixture writes.
const namespace = "bench"

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crd is one namespaced custom resource of the fixture, served at v1, each
// in its own group (a member's discovery answers per group).
type crd struct{ group, kind, plural string }

func fixtureCRD(i int) crd {
	return crd{group: fmt.Sprintf("g%02d.bench.example.com", i), kind: fmt.Sprintf("Thing%02d", i), plural: fmt.Sprintf("thing%02ds", i)}
}

// lateCRD is the one installed in a member during the everything phase.
var lateCRD = crd{group: "late.bench.example.com", kind: "Latecomer", plural: "latecomers"}

func (c crd) gvr() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: c.group, Version: "v1", Resource: c.plural}
}

// install creates c in cl and waits until it is served (a list answers).
func (c crd) install(ctx context.Context, cl *harness.Cluster) error {
	doc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": c.plural + "." + c.group},
		"spec": map[string]any{"group": c.group, "scope": "Namespaced",
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
			"names": map[string]any{"plural": c.plural, "singular": strings.ToLower(c.kind), "kind": c.kind, "listKind": c.kind + "List"}},
	}}
	if _, err := cl.Dynamic().Resource(crdGVR).Create(ctx, doc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("%s: CRD %s: %w", cl.Name, c.plural, err)
	}
	return waitFor(ctx, time.Minute, cl.Name+": CRD "+c.plural+" served", func() error {
		_, err := cl.Dynamic().Resource(c.gvr()).Namespace(namespace).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	})
}

// object is object i of c: a few hundred bytes of spec, like a small
// operator's custom resource.
func (c crd) object(i int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": c.group + "/v1", "kind": c.kind,
		"metadata": map[string]any{"name": fmt.Sprintf("obj-%05d", i), "namespace": namespace,
			"labels": map[string]any{"app": []string{"web", "api", "worker", "cache"}[i%4], "tier": []string{"frontend", "backend"}[i%2]}},
		"spec": map[string]any{"replicas": int64(i%5 + 1), "image": "registry.example.com/app:1.2.3", "owner": "team-" + fmt.Sprint(i%20),
			"ports":   []any{map[string]any{"name": "http", "port": int64(8080)}, map[string]any{"name": "metrics", "port": int64(9090)}},
			"backups": map[string]any{"schedule": "0 3 * * *", "retention": "7d", "target": "s3://backups/" + c.plural}},
	}}
}

func pod(i int) *corev1.Pod {
	app := []string{"web", "api", "worker", "cache"}[i%4]
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("pod-%07d", i),
			Labels: map[string]string{"app": app, "tier": []string{"frontend", "backend"}[i%2]}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%03d", i%200), ServiceAccountName: app,
			Containers: []corev1.Container{{Name: app, Image: "registry.example.com/" + app + ":1.2.3",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
	}
	harness.DefaultPod(p)
	return p
}

// populate writes one member's fixture: the collector's read-all grant,
// the namespace, the CRDs and their objects (through the apiserver) and
// the Pods (straight into etcd, harness.StorePods).
func populate(ctx context.Context, cl *harness.Cluster, cfg config) error {
	if err := cl.GrantCollectorReadAll(ctx); err != nil {
		return err
	}
	if _, err := cl.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i := range cfg.crds {
		g.Go(func() error { return fixtureCRD(i).install(gctx, cl) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range cfg.crds {
		c := fixtureCRD(i)
		for j := range cfg.objects {
			g.Go(func() error {
				_, err := cl.Dynamic().Resource(c.gvr()).Namespace(namespace).Create(gctx, c.object(j), metav1.CreateOptions{})
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("%s: custom objects: %w", cl.Name, err)
	}
	return cl.StorePods(ctx, cfg.pods, 2, func(i int) (*corev1.Pod, error) { return pod(i), nil })
}
