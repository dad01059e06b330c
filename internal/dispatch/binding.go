package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/internal/store"
)

// Queues bound to tenants.
//
// A worker pool may be bound to tenants (orrery worker --tenant): it then
// serves each of its queues for those tenants only, through a queue of each
// tenant's own, QUEUE|TENANT (BoundQueue), which is an ordinary queue to
// admission, River and the workers. The pool writes its bindings (table
// queue_bindings) when it starts; from then on every task and notification
// of the tenant in that queue is made in the bound queue (Bindings.Queue,
// read in the transaction that makes them), whether or not a bound worker
// is alive, so the queue's shared pool never runs them. Tenants without a
// binding keep the shared queue. What a binding does not move: tasks made,
// or handed to River, before it committed.

// boundSeparator joins a queue and a tenant in a bound queue's name: River
// allows it inside a queue name, and Orrery's names never hold it.
const boundSeparator = "|"

// riverQueueName is what River accepts as a queue name.
var riverQueueName = regexp.MustCompile(`^[a-z0-9]+(?:[_|-]?[a-z0-9]+)*$`)

// maxRiverQueueName is River's bound on a queue name's length.
const maxRiverQueueName = 64

// BoundQueue is the queue of tenant's own pool of queue: queue|tenant.
// The error says why a queue and tenant cannot make one (River's names are
// stricter than Orrery's).
func BoundQueue(queue, tenant string) (string, error) {
	name := queue + boundSeparator + tenant
	switch {
	case strings.Contains(queue+tenant, boundSeparator) || !riverQueueName.MatchString(queue) || !riverQueueName.MatchString(tenant):
		return "", fmt.Errorf("queue %q of tenant %q cannot be bound: a bound queue's name, QUEUE|TENANT, takes letters and digits separated by single - or _", queue, tenant)
	case len(name) > maxRiverQueueName:
		return "", fmt.Errorf("queue %q of tenant %q cannot be bound: %q is longer than %d bytes", queue, tenant, name, maxRiverQueueName)
	}
	return name, nil
}

// BaseQueue is the queue a bound queue serves (the queue itself when it
// is not bound).
func BaseQueue(queue string) string {
	base, _, _ := strings.Cut(queue, boundSeparator)
	return base
}

// BoundTo reports whether queue is a bound queue of tenant.
func BoundTo(queue, tenant string) bool {
	_, t, ok := strings.Cut(queue, boundSeparator)
	return ok && t == tenant
}

// Bindings are the bound queues of some tenants: tenant, then queue, to
// bound queue.
type Bindings map[uuid.UUID]map[string]string

// LoadBindings reads the bindings of tenants (a tenant may be named more
// than once).
func LoadBindings(ctx context.Context, q *store.Queries, tenants []uuid.UUID) (Bindings, error) {
	rows, err := q.QueueBindingsOf(ctx, tenants)
	if err != nil {
		return nil, fmt.Errorf("dispatch: queue bindings: %w", err)
	}
	b := Bindings{}
	for _, r := range rows {
		if b[r.TenantID] == nil {
			b[r.TenantID] = map[string]string{}
		}
		b[r.TenantID][r.Queue] = r.BoundQueue
	}
	return b, nil
}

// Queue is the queue tenant's work in queue goes to: its bound queue, or
// queue itself.
func (b Bindings) Queue(tenant uuid.UUID, queue string) string {
	if bound, ok := b[tenant][queue]; ok {
		return bound
	}
	return queue
}

// ErrNoTenant is a tenant to bind that does not exist.
var ErrNoTenant = errors.New("no such tenant")

// Bind binds queues of the named tenants to their bound queues in one
// transaction, auditing each binding it makes in its tenant's trail as by
// (the worker). A binding that exists already is kept.
func Bind(ctx context.Context, pool *pgxpool.Pool, tenants, queues []string, by string) error {
	if len(tenants) == 0 {
		return nil
	}
	bound := make(map[string][]string, len(tenants)) // each tenant's bound queues, in the order of queues
	for _, t := range tenants {
		for _, q := range queues {
			name, err := BoundQueue(q, t)
			if err != nil {
				return err
			}
			bound[t] = append(bound[t], name)
		}
	}
	err := store.InTx(ctx, pool, func(q *store.Queries) error {
		p := store.BindQueuesParams{BoundBy: by}
		for _, name := range tenants {
			id, err := q.TenantByName(ctx, name)
			if store.IsNotFound(err) {
				return fmt.Errorf("tenant %q: %w", name, ErrNoTenant)
			}
			if err != nil {
				return err
			}
			for i, queue := range queues {
				p.TenantIds, p.Queues, p.BoundQueues = append(p.TenantIds, id), append(p.Queues, queue), append(p.BoundQueues, bound[name][i])
			}
		}
		made, err := q.BindQueues(ctx, p)
		if err != nil {
			return err
		}
		for _, m := range made {
			after, _ := json.Marshal(map[string]string{"queue": m.Queue, "bound_queue": m.BoundQueue})
			if err := q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: m.TenantID, Actor: "worker " + by,
				Action: "bind_queue", TargetKind: "queue", TargetID: m.TenantID, TargetName: m.Queue, After: after}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dispatch: bind queues: %w", err)
	}
	return nil
}

// ErrNotBound is an unbinding of a queue that is not bound.
var ErrNotBound = errors.New("the queue is not bound to the tenant")

// Unbind removes the binding of tenant's queue, auditing it as by: the
// tenant's tasks of the queue made afterwards go to the shared queue
// again (those in the bound queue stay there). A bound worker of the
// queue that starts again binds it again.
func Unbind(ctx context.Context, pool *pgxpool.Pool, tenant, queue, by string) error {
	err := store.InTx(ctx, pool, func(q *store.Queries) error {
		id, err := q.TenantByName(ctx, tenant)
		if store.IsNotFound(err) {
			return fmt.Errorf("tenant %q: %w", tenant, ErrNoTenant)
		}
		if err != nil {
			return err
		}
		bound, err := q.UnbindQueue(ctx, store.UnbindQueueParams{TenantID: id, Queue: queue})
		if store.IsNotFound(err) {
			return fmt.Errorf("queue %q of tenant %q: %w", queue, tenant, ErrNotBound)
		}
		if err != nil {
			return err
		}
		before, _ := json.Marshal(map[string]string{"queue": queue, "bound_queue": bound})
		return q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: id, Actor: by,
			Action: "unbind_queue", TargetKind: "queue", TargetID: id, TargetName: queue, Before: before})
	})
	if err != nil {
		return fmt.Errorf("dispatch: unbind queue: %w", err)
	}
	return nil
}
