package query

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

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
	// ErrTooManyRequests: a server limit on what one client (or all of
	// them) may hold at once, such as concurrent watches, is reached; the
	// client retries later (Kubernetes answers 429 TooManyRequests).
	ErrTooManyRequests = errors.New("too many requests")
	// ErrRequestTooLarge: a request body exceeds the server's limit; it is
	// refused before it is decoded (Kubernetes answers 413).
	ErrRequestTooLarge = errors.New("request entity too large")
	// ErrCorrupt: a stored object read back is not valid JSON (stored
	// before the materializer checked the whole grammar, or by another
	// writer). An answer of many objects leaves it out; an answer of that
	// object alone fails with this.
	ErrCorrupt = errors.New("malformed stored object")
	// ErrOutsideWindow: a history read (an as-of time, a revision) asks
	// for a moment before the oldest change the hub still keeps, or the
	// store keeps no history.
	ErrOutsideWindow = errors.New("outside the history's retention window")
	// ErrNotKept: the answer needs an index this hub does not keep
	// (the relationship index without --relations); 501, like history
	// that is off.
	ErrNotKept = errors.New("not kept by this hub")
)

// NotFoundError is the not-found error every backend returns, so that the
// backends answer the same query with the same message. The message is
// Kubernetes' own (pods "web" not found): kubectl users know it, and it
// names nothing but what the caller asked for, so an object the caller
// may not see and one that does not exist read the same.
func NotFoundError(gvr schema.GroupVersionResource, name string) error {
	return &notFoundError{msg: fmt.Sprintf("%s %q not found", gvr.GroupResource(), name)}
}

// notFoundError is ErrNotFound with a message of its own: wrapping with
// %w would prefix the sentinel's text to Kubernetes' message.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

func (e *notFoundError) Unwrap() error { return ErrNotFound }

// ConflictError is the error of an unqualified Get that matched objects in
// several clusters; it names them, as Karmada does. Callers pass only the
// clusters the caller may see (GetOptions.Sees).
func ConflictError(gvr schema.GroupVersionResource, namespace, name string, clusters []string) error {
	return fmt.Errorf("%w: %s %q found in clusters [%s]", ErrConflict, gvr.GroupResource(), qualified(namespace, name), strings.Join(clusters, ", "))
}

func qualified(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}
