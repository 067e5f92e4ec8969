package registry

import "errors"

// Sentinel errors, checked with errors.Is and translated to status codes once
// at the API boundary. Every one of them means the caller sent bad input (400).
var (
	// ErrDecode: the document is not well-formed YAML/JSON, a value has the
	// wrong type, or a field the schema requires is missing.
	ErrDecode = errors.New("cannot decode ResourceRegistry")

	// ErrUnknownField: the document has a field the schema does not define.
	// It is always also ErrDecode.
	ErrUnknownField = errors.New("unknown field")

	// ErrUnsupportedType: apiVersion or kind is not one this package accepts.
	ErrUnsupportedType = errors.New("unsupported apiVersion or kind")

	// ErrInvalid: the object decoded but breaks a validation rule. Use
	// errors.As with *InvalidError to get every violation with its field path.
	ErrInvalid = errors.New("invalid ResourceRegistry")
)
