// Package metrics tests what a Prometheus scrape of a real hub reports,
// and that every metric the shipped dashboard queries exists.
package metrics
