// Package authz tests authorization on every surface of a real hub:
// TLS, bearer tokens, client certificates and the policy over gRPC, REST
// and the Kubernetes API (auth_test.go), member authorizers marked
// (memberauthz_test.go), and member RBAC decided as the member decides it,
// through the hub and against the members' own answers (the memberrbac
// files).
package authz
