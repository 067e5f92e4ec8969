package tlsfiles

import "errors"

// ErrKeyPair is returned for a certificate and key that cannot be loaded
// or do not belong together.
var ErrKeyPair = errors.New("invalid TLS key pair")

// ErrCAFile is returned for a CA file that cannot be read or holds no PEM
// certificate.
var ErrCAFile = errors.New("invalid TLS CA file")
