// Package api serves Orrery's Connect-RPC services (gRPC, gRPC-Web and
// Connect JSON on one port, with gRPC reflection and health) over the
// engine, and is the only place that maps engine errors to Connect codes.
// The .proto files are in proto/, the generated code in gen/.
package api
