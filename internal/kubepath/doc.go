// Package kubepath owns what a Kubernetes API request path means to
// fleetview (issue #43): the one parser that turns a request's escaped path
// into a typed Request (cluster, API group, version, resource, subresource,
// namespace, name, verb; or discovery, OpenAPI, version), the validation of
// such a value, and the one function that spells it back as a URL path.
//
// The hub parses a request once, from its escaped form, and authorizes,
// rate-limits, audits and forwards the typed value; the collector validates
// the value it receives with the same rules and builds the member's URL
// from its fields, each segment escaped, so nothing is ever decoded twice
// and the member executes exactly the request the hub judged. A segment
// that decodes to something a path cannot carry unambiguously (a '/', '%',
// '?', '#', a control character, "." or "..") or an empty one is refused,
// as is any shape that is not a Kubernetes API path.
package kubepath
