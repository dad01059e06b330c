// Package examples holds the example jobs that `orrery dev` loads and the
// tests use, embedded so that the binary carries them.
package examples

import "embed"

//go:embed *.yaml
var files embed.FS

// FS is the example YAML files.
func FS() embed.FS { return files }
