package api

import _ "embed"

// OpenAPI is the OpenAPI 3 document of the API (openapi.yaml), for zeishd to
// serve and for tests to check the server against.
//
//go:embed openapi.yaml
var OpenAPI []byte
