// Package auth decides who may read what from the cache. Access to the cache
// is access to every cluster's data, and a central cache bypasses
// member-cluster RBAC (docs/security.md); so the query
// API authenticates every call and authorizes it per subject against
// clusters, namespaces, resources and verbs, and list/watch filtering is
// pushed down (a caller's scope narrows the query itself; nothing outside it
// is read).
//
// Authentication: static bearer tokens (a kube-apiserver style token file,
// `token,user,uid,"group1,group2"`) and TLS client certificates (CN = user,
// O = groups). Authorization: a policy file of allow rules; anything not
// allowed is denied. Secrets are never matched by a "*" resource, and
// registry writes (the registry-admin verb) never by a "*" verb: a rule must
// name them.
//
// It owns identities, policies and decisions only; queryapi calls it.
package auth
