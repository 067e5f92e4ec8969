// Package lifecycle runs a process's components in a stated order: each
// component is a Runnable (Run blocks until its context ends, then releases
// what it holds), components are grouped, groups start one after another
// (each built, started and, if it says so, ready before the next is built),
// and stop in a stated order of stages, each stage's groups stopped at once
// and awaited before the next stage's. Any failure (a group that cannot be
// built or made ready, a runnable that returns an error) stops everything
// started, in that same order, as the end of the parent context does.
//
// It owns only the order, so a composition root (cmd/fleetview/app) says
// once what starts before what and what must outlive what, instead of
// nesting errgroups, deferred closes and early-exit cleanups per command.
// The shape follows controller-runtime's pkg/manager (Runnables started in
// groups), with the stop order stated instead of implied.
package lifecycle
