package api

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 document of the REST API, generated from the
// protos (`make generate`: protoc-gen-openapi, then tools/openapi).
//
//go:embed gen/openapi/openapi.json
var openAPI []byte

// OpenAPIDocument is the OpenAPI 3.1 document of the REST API.
func OpenAPIDocument() []byte { return openAPI }

// OpenAPI serves the document; it holds no secret and needs no key.
func OpenAPI() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(openAPI)
	})
}
