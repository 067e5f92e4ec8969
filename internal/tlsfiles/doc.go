// Package tlsfiles serves TLS key pairs from PEM files that an operator (or
// cert-manager, through a mounted Secret) replaces while the process runs:
// the files are looked at again on each handshake and a changed pair is
// loaded, so a rotated certificate is served without a restart. It owns
// reading and checking certificate, key and CA files into tls.Configs for
// the query API and the embedded NATS server; it does not listen, dial or
// decide which connections need TLS.
package tlsfiles
