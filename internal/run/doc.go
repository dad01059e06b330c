// Package run creates runs and their tasks, derives a run's status from its
// tasks, and serves the run history: list, get, trigger, cancel, and the
// dead-letter list with replay.
package run
