package job

import (
	"context"
	"errors"

	"github.com/orrery-dev/orrery/dag"
)

// Outcomes of Apply.
const (
	Created   = "created"
	Updated   = "updated"
	Unchanged = "unchanged"
)

// Apply makes the stored job match res: it creates the job when no live
// job has its namespace and name, updates it when its definition differs,
// and otherwise leaves it alone. A paused job stays paused.
func (s *Service) Apply(ctx context.Context, a Actor, res dag.Resource) (string, *Job, error) {
	res, err := prepare(res)
	if err != nil {
		return "", nil, err
	}
	for {
		cur, err := s.Get(ctx, a, Ref{Namespace: res.Metadata.Namespace, Name: res.Metadata.Name})
		switch {
		case errors.Is(err, ErrNotFound):
			j, err := s.Create(ctx, a, res, "")
			if errors.Is(err, ErrAlreadyExists) {
				continue // created concurrently: compare with that one
			}
			return Created, j, err
		case err != nil:
			return "", nil, err
		case sameDefinition(cur, res):
			return Unchanged, cur, nil
		}
		j, err := s.Update(ctx, a, Ref{ID: cur.ID}, res, cur.Version)
		var vc *VersionConflictError
		if errors.As(err, &vc) {
			continue // changed concurrently: compare again
		}
		return Updated, j, err
	}
}
