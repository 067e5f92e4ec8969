// Package kubeapi tests the Kubernetes API a real hub serves over real
// member clusters, with Debian's kubectl and client-go as the callers:
// discovery, lists, gets, watches and informers (kube_test.go), the list
// policy (listpolicy_test.go), protobuf (protobuf_test.go) and kubectl's
// Tables printed as the members print them (table_test.go), and the hub's
// table of built-in resources against a member's discovery (builtin_test.go).
package kubeapi
