package dispatch

import (
	"strings"

	"github.com/google/uuid"
)

// Remote steps (docs/remote-workers.md) wait in a queue of their tenant's
// own, QUEUE@TENANT_ID: its slots are the capacity that tenant's remote
// workers declare for QUEUE, so no tenant's remote tasks are admitted
// against another tenant's workers. Their River jobs all go to one River
// queue, HandoffQueue, whose workers (the gateways of the API nodes) turn
// each into an offer that a remote worker claims.

// HandoffQueue is the River queue of every remote task's jobs.
const HandoffQueue = "orrery_remote"

const remoteSeparator = "@"

// RemoteQueue is the queue of the tasks of a remote step whose step queue
// is queue, in tenant's runs.
func RemoteQueue(queue string, tenant uuid.UUID) string {
	return queue + remoteSeparator + tenant.String()
}

// IsRemote reports whether queue is a remote step's queue (no queue name
// of a step holds the separator).
func IsRemote(queue string) bool { return strings.Contains(queue, remoteSeparator) }

// RemoteBase is the step queue of a remote queue (queue itself for another).
func RemoteBase(queue string) string {
	base, _, _ := strings.Cut(queue, remoteSeparator)
	return base
}

// RiverQueue is the River queue of a task's jobs: its queue, or the
// hand-off queue for a remote step's.
func RiverQueue(queue string) string {
	if IsRemote(queue) {
		return HandoffQueue
	}
	return queue
}
