package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/store"
)

// MaxProfiles bounds a tenant's resource profiles.
const MaxProfiles = 100

// Profile is a tenant's named resource vector (docs/resources.md): steps
// name it by resource_profile.
type Profile struct {
	Name       string
	Resources  resources.Vector
	CreateTime time.Time
	UpdateTime time.Time
}

// ErrProfileInUse refuses the deletion of a profile a live job names.
var ErrProfileInUse = errors.New("access: a live job names the profile")

func profileOf(r store.ResourceProfile) Profile {
	return Profile{Name: r.Name, Resources: resources.FromColumns(r.Cpu, r.Memory, r.Gpu, r.Custom),
		CreateTime: r.CreatedAt, UpdateTime: r.UpdatedAt}
}

func profileJSON(p *Profile) json.RawMessage {
	if p == nil {
		return nil
	}
	b, _ := json.Marshal(map[string]any{"name": p.Name, "resources": p.Resources.Spec()})
	return b
}

// SetProfile creates or replaces a profile of by's tenant, audited
// (set_profile, with before and after). A change applies to runs created
// after it: a run pins the resources it resolved. The caller's authority
// (an admin of the tenant) is the API's to check.
func (k *Service) SetProfile(ctx context.Context, by Principal, name string, spec resources.Spec) (Profile, error) {
	if err := dag.ValidateName(name); err != nil {
		return Profile{}, &dag.FieldError{Field: "name", Message: err.Error()}
	}
	v, err := resources.Parse(spec)
	if err != nil {
		var fe *resources.FieldError
		if errors.As(err, &fe) {
			return Profile{}, &dag.FieldError{Field: "resources." + fe.Field, Message: fe.Message}
		}
		return Profile{}, &dag.FieldError{Field: "resources", Message: err.Error()}
	}
	if v.IsZero() {
		return Profile{}, &dag.FieldError{Field: "resources", Message: "a profile asks for at least one resource (cpu, memory, gpu or custom)"}
	}
	var custom []byte
	if len(v.Custom) > 0 {
		custom, _ = json.Marshal(v.Custom)
	}
	var out Profile
	err = store.InTx(ctx, k.pool, func(q *store.Queries) error {
		// A profile no step could ever be admitted with is refused.
		raw, err := q.TenantMaxResources(ctx, by.Tenant)
		if err != nil && !store.IsNotFound(err) {
			return err
		}
		var quota resources.Vector
		_ = json.Unmarshal(raw, &quota) // written by SetQuota
		if r := v.Over(quota); r != "" {
			return &dag.FieldError{Field: "resources." + resources.Field(r), Message: fmt.Sprintf("%s is past the tenant's quota of %s (orrery tenants quota)",
				resources.Format(r, v.Get(r)), resources.Format(r, quota.Get(r)))}
		}
		var before *Profile
		old, err := q.LockProfile(ctx, store.LockProfileParams{TenantID: by.Tenant, Name: name})
		switch {
		case store.IsNotFound(err):
			n, err := q.CountProfiles(ctx, by.Tenant)
			if err != nil {
				return err
			}
			if n >= MaxProfiles {
				return &dag.FieldError{Field: "name", Message: fmt.Sprintf("the tenant has %d profiles, the most it may (delete one first)", n)}
			}
		case err != nil:
			return err
		default:
			p := profileOf(old)
			before = &p
		}
		row, err := q.UpsertProfile(ctx, store.UpsertProfileParams{TenantID: by.Tenant, Name: name, Cpu: v.CPU, Memory: v.Memory, Gpu: v.GPU, Custom: custom})
		if err != nil {
			return err
		}
		out = profileOf(row)
		return q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: by.Tenant, Actor: by.Actor().Name,
			Action: "set_profile", TargetKind: "profile", TargetName: name, Before: profileJSON(before), After: profileJSON(&out)})
	})
	return out, err
}

// GetProfile reads a profile of a tenant; ErrNotFound when it has none of
// that name.
func (k *Service) GetProfile(ctx context.Context, tenant uuid.UUID, name string) (Profile, error) {
	rows, err := store.New(k.pool).ProfilesNamed(ctx, store.ProfilesNamedParams{TenantID: tenant, Names: []string{name}})
	if err != nil {
		return Profile{}, err
	}
	if len(rows) == 0 {
		return Profile{}, fmt.Errorf("%w: no resource profile %q", ErrNotFound, name)
	}
	return profileOf(rows[0]), nil
}

// ListProfiles lists a tenant's profiles by name.
func (k *Service) ListProfiles(ctx context.Context, tenant uuid.UUID) ([]Profile, error) {
	rows, err := store.New(k.pool).ListProfiles(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]Profile, len(rows))
	for i, r := range rows {
		out[i] = profileOf(r)
	}
	return out, nil
}

// DeleteProfile deletes a profile of by's tenant that no live job names,
// audited (delete_profile); ErrProfileInUse, naming some of the jobs,
// while one does.
func (k *Service) DeleteProfile(ctx context.Context, by Principal, name string) (Profile, error) {
	var out Profile
	err := store.InTx(ctx, k.pool, func(q *store.Queries) error {
		old, err := q.LockProfile(ctx, store.LockProfileParams{TenantID: by.Tenant, Name: name})
		if store.IsNotFound(err) {
			return fmt.Errorf("%w: no resource profile %q", ErrNotFound, name)
		}
		if err != nil {
			return err
		}
		out = profileOf(old)
		jobs, err := q.ProfileJobs(ctx, store.ProfileJobsParams{TenantID: by.Tenant, Profile: name})
		if err != nil {
			return err
		}
		if len(jobs) > 0 {
			names := make([]string, len(jobs))
			for i, j := range jobs {
				names[i] = j.Namespace + "/" + j.Name
			}
			return fmt.Errorf("%w: %s names %s (change or delete it first)", ErrProfileInUse, strings.Join(names, ", "), name)
		}
		if err := q.DeleteProfile(ctx, store.DeleteProfileParams{TenantID: by.Tenant, Name: name}); err != nil {
			if store.IsForeignKeyViolation(err, "job_profiles_tenant_id_profile_fkey") {
				return fmt.Errorf("%w: a job named %s meanwhile", ErrProfileInUse, name)
			}
			return err
		}
		return q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: by.Tenant, Actor: by.Actor().Name,
			Action: "delete_profile", TargetKind: "profile", TargetName: name, Before: profileJSON(&out)})
	})
	return out, err
}
