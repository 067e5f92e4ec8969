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
)
