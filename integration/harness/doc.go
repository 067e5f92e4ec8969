// Package harness starts real Kubernetes member clusters for integration tests
// and demos: one etcd and one kube-apiserver per cluster, all on 127.0.0.1.
//
// The binaries are built from the Go module proxy by scripts/build-k8s.sh
// (see docs/running-kube-apiserver.md) and cached outside the repository; Start
// runs that script when Options.BinDir is empty. kubectl is not needed.
//
// Each member cluster is a bare control plane: one kube-apiserver sharing the
// fleet's single etcd under its own --etcd-prefix=/<name>. There is no kubelet,
// scheduler or controller manager, so objects are stored and watched for real
// but nothing reconciles them (Pods stay Pending, Deployments create no
// ReplicaSets): create whatever objects a test needs directly.
//
// Every apiserver authenticates two static tokens:
//   - AdminUser (group system:masters): full access; used by
//     Cluster.AdminRESTConfig, Cluster.Clientset and Cluster.Dynamic.
//   - CollectorUser ("fleetview-collector", no groups besides
//     system:authenticated): subject to real RBAC; it can read nothing until
//     Cluster.GrantCollectorReadAll is called.
//
// Typical test use:
//
//	f, err := harness.Start(ctx, harness.Options{Clusters: []string{"member1", "member2"}})
//	if err != nil {
//		t.Fatal(err) // fail, never skip: the binaries build from the module proxy
//	}
//	t.Cleanup(func() { _ = f.Stop() })
//
// Child processes run in their own process group and get SIGKILL when the
// process that started them dies (Linux), so a crashed or killed test leaves
// nothing behind. Start's context bounds start-up only, not the processes'
// lifetime: call Fleet.Stop.
//
// The apiservers start concurrently; how long start-up takes, idle and
// under load, and what an idle apiserver holds in memory:
// docs/running-kube-apiserver.md#starting-a-fleet.
package harness
