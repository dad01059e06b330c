// Package dag defines Orrery's job resource (the YAML kept in git), decodes
// it with file, line and column for every error, and validates it: names,
// schedule, policies, executors, payload limits, and the graph of steps.
// It does no I/O beyond the bytes it is handed and imports nothing of
// Orrery's but the pure schedule package.
package dag
