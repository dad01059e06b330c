// Package bench holds Orrery's benchmark scenarios. They start real
// processes (the orrery binary, a PostgreSQL with its default, durable
// settings) on this machine; results and the commands that produced them
// are in BENCHMARKS.md.
package bench
