package query

import "errors"

var (
	// ErrNotFound: no such object in the selected clusters.
	ErrNotFound = errors.New("not found")
	// ErrConflict: an unqualified Get matched objects in several clusters.
	ErrConflict = errors.New("ambiguous object")
	// ErrInvalid: a request field is malformed (selector, token, ...).
	ErrInvalid = errors.New("invalid request")
	// ErrExpired: a resourceVersion or continue token can no longer be served.
	ErrExpired = errors.New("resource version expired")
	// ErrTooLargeVersion: a request asked for a resourceVersion the cache has
	// not reached within the wait budget (Kubernetes answers 504 Timeout).
	ErrTooLargeVersion = errors.New("too large resource version")
	// ErrTooSlow: a watcher did not keep up and its bounded buffer
	// overflowed; the client must resume or re-list.
	ErrTooSlow = errors.New("watcher too slow")
	// ErrNotReady: the cache has not synced every registered cluster yet.
	ErrNotReady = errors.New("not ready")
)
