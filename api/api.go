// Package api holds paysvc's external HTTP contract, api/openapi.yaml, and
// embeds it so that the binary serves exactly the document it was built
// with (GET /openapi.yaml) and tests can hold the code to it.
package api

import _ "embed"

// Spec is api/openapi.yaml, byte for byte. Do not modify it: it is shared.
//
//go:embed openapi.yaml
var Spec []byte

// ContentType is the media type GET /openapi.yaml answers with.
const ContentType = "application/yaml"
