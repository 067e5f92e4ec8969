// Package benchutil holds what the benchmark programs under integration/cmd
// share: scale knobs from the environment, progress lines, percentiles of
// timings, a process's memory and CPU from /proc, memory cgroups, and the
// fleetview side of a run: a work directory with the binary built, the
// member clusters started and filled, a hub's addresses, its processes
// started and stopped, and what the hub answers (/readyz, /readyz/clusters,
// a list's count, /metrics gauges, goroutines, registry applies). It is
// test support for those programs, never production code.
package benchutil
