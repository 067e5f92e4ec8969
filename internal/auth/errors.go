package auth

import "errors"

var (
	// ErrUnauthenticated: no or unknown credentials.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden: the caller is known but not allowed.
	ErrForbidden = errors.New("forbidden")
	// ErrInvalidPolicy: the policy or token file is malformed.
	ErrInvalidPolicy = errors.New("invalid auth configuration")
)
