// Package progress owns the progress display of long command-line jobs
// (`fleetview rebuild`): a bar with rate and ETA on a terminal, a log line
// every few seconds otherwise, nothing with "none".
package progress
