package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/orrery-dev/orrery/dag/resources"
)

// Fetched is a River job that a worker fetched: the attempt it was made
// to start.
type Fetched struct {
	JobID   int64 // River's id
	TaskID  uuid.UUID
	Attempt int
	// Need and Reserve are the job's (TaskArgs): a redelivery carries them.
	Need    *resources.Vector
	Reserve bool
}

// fetchedPage bounds one listing query.
const fetchedPage = 500

// FetchedBy lists the River jobs still running under the River client id
// of one worker process (the last client that fetched them), which served
// queues. In outbox mode it reads the queue database of those queues (all
// of them when none is given); otherwise tx, the state transaction, which
// then shares River's tables.
func (d *Dispatcher) FetchedBy(ctx context.Context, tx pgx.Tx, clientID string, queues []string) ([]Fetched, error) {
	if !d.outbox {
		return fetchedBy(ctx, d.river, tx, clientID)
	}
	var out []Fetched
	for _, p := range d.dbs.poolsOf(queues) {
		f, err := fetchedBy(ctx, d.clients[p], nil, clientID)
		if err != nil {
			return nil, err
		}
		out = append(out, f...)
	}
	return out, nil
}

// fetchedBy is FetchedBy of one River client: through tx, or its own pool
// when tx is nil.
func fetchedBy(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, clientID string) ([]Fetched, error) {
	params := river.NewJobListParams().
		States(rivertype.JobStateRunning).
		Kinds(TaskArgs{}.Kind()).
		Where("attempted_by[array_length(attempted_by, 1)] = @client", river.NamedArgs{"client": clientID}).
		First(fetchedPage)
	var out []Fetched
	for {
		var res *river.JobListResult
		var err error
		if tx == nil {
			res, err = client.JobList(ctx, params)
		} else {
			res, err = client.JobListTx(ctx, tx, params)
		}
		if err != nil {
			return nil, fmt.Errorf("dispatch: list River jobs fetched by %s: %w", clientID, err)
		}
		for _, j := range res.Jobs {
			var args TaskArgs
			if err := unmarshalArgs(j, &args); err != nil {
				return nil, err
			}
			out = append(out, Fetched{JobID: j.ID, TaskID: args.TaskID, Attempt: args.Attempt, Need: args.Need, Reserve: args.Reserve})
		}
		if len(res.Jobs) < fetchedPage {
			return out, nil
		}
		params = params.After(res.LastCursor)
	}
}

func unmarshalArgs(j *rivertype.JobRow, args *TaskArgs) error {
	if err := json.Unmarshal(j.EncodedArgs, args); err != nil {
		return fmt.Errorf("dispatch: River job %d: args: %w", j.ID, err)
	}
	return nil
}

// queueDepthSQL reads River's own table (outside Orrery's schema, so not
// through sqlc): the ready jobs of each queue and the oldest one's wait.
// Every queue a River client served (river_queue) appears, at 0 when it
// has nothing ready, and so does every queue with ready jobs that no
// worker serves (a typo in a step's queue).
const queueDepthSQL = `WITH q AS (
    SELECT name AS queue FROM river_queue
    UNION
    SELECT DISTINCT queue FROM river_job WHERE state = 'available'
)
SELECT q.queue, count(j.id)::bigint, COALESCE(EXTRACT(EPOCH FROM now() - min(j.scheduled_at)), 0)::float8
FROM q LEFT JOIN river_job AS j ON j.queue = q.queue AND j.state = 'available'
GROUP BY q.queue`

// QueueDepth is one queue's ready River jobs and how long the oldest has
// waited.
type QueueDepth struct {
	Ready         int64
	OldestSeconds float64
}

// QueueDepthsOf reads every queue's depth from every queue database. A
// database that does not answer leaves its queues out and its error in the
// returned one, beside the others' depths.
func QueueDepthsOf(ctx context.Context, dbs QueueDBs) (map[string]QueueDepth, error) {
	out := map[string]QueueDepth{}
	var errs []error
	for _, p := range dbs.Pools() {
		ds, err := QueueDepths(ctx, p)
		if err != nil {
			errs = append(errs, fmt.Errorf("queue database %s: %w", p.Config().ConnConfig.Database, err))
			continue
		}
		for q, d := range ds {
			o := out[q]
			o.Ready += d.Ready
			o.OldestSeconds = max(o.OldestSeconds, d.OldestSeconds)
			out[q] = o
		}
	}
	return out, errors.Join(errs...)
}

// QueueDepths reads every queue's depth from one queue database.
func QueueDepths(ctx context.Context, queue DBTX) (map[string]QueueDepth, error) {
	rows, err := queue.Query(ctx, queueDepthSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]QueueDepth{}
	for rows.Next() {
		var q string
		var d QueueDepth
		if err := rows.Scan(&q, &d.Ready, &d.OldestSeconds); err != nil {
			return nil, err
		}
		out[q] = d
	}
	return out, rows.Err()
}

// DBTX is what QueueDepths reads through (a pool).
type DBTX interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}
