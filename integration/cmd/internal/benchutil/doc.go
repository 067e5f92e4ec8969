// Package benchutil holds what the benchmark programs under integration/cmd
// share: scale knobs from the environment, progress lines, percentiles of
// timings, and a process's memory from /proc.
package benchutil
