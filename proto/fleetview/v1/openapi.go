package fleetviewv1

import _ "embed"

// OpenAPI is the OpenAPI v2 document generated from these protos
// (scripts/gen.sh); the query API serves it so clients see exactly the API
// the binary implements.
//
//go:embed fleetview.swagger.json
var OpenAPI []byte
