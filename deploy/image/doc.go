// Package image builds fleetview's container image without a container
// engine: a multi-platform OCI image index (linux/amd64 and linux/arm64 by
// default) of a static fleetview binary, the Mozilla CA bundle (from the
// golang.org/x/crypto/x509roots/fallback module, so every checkout packs the
// same certificates) and a non-root user, with no shell or other files. It
// owns the image's layout and its reproducibility: every timestamp is the
// commit's time, tar entries are sorted with fixed owners, the binary is
// built with -trimpath and without VCS stamping (the commit comes in by
// -ldflags), so one commit gives one digest. It writes the index as an OCI
// archive (`ctr -n k8s.io images import` loads it) or pushes it to a
// registry. scripts/image is its command; the helm chart's default image
// (deploy/helm/fleetview) is what it builds by default.
package image
