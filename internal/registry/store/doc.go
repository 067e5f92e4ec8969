// Package store keeps ResourceRegistries in the fv_registries JetStream KV
// bucket. It validates before every write, so an invalid registry is never
// stored, and it is the only writer of that bucket.
package store
