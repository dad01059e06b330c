package job

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound: no job with that id or name in the caller's tenant.
	ErrNotFound = errors.New("job not found")
	// ErrAlreadyExists: a live job already has that namespace and name.
	ErrAlreadyExists = errors.New("a job with this namespace and name already exists")
	// ErrIdempotencyConflict: the idempotency key was used with another request.
	ErrIdempotencyConflict = errors.New("idempotency key already used with a different request")
	// ErrDeleted: the job is deleted and cannot change any more.
	ErrDeleted = errors.New("job is deleted")
)

// VersionConflictError: an update named a version that is no longer current.
type VersionConflictError struct {
	Expected, Current int64
}

func (e *VersionConflictError) Error() string {
	return fmt.Sprintf("job is at version %d, not %d: read it again and retry", e.Current, e.Expected)
}
