// Package access says who calls and what they may do: tenants, API keys,
// the principals keys stand for, and the roles those principals hold.
//
// # Keys
//
// A key is "ork_" followed by 43 characters of base64url (256 random
// bits). Only its SHA-256 is stored: a slow hash (bcrypt, argon2id) guards
// guessable passwords, and buys nothing against a key of full entropy,
// while it would cost every request tens of milliseconds. The first 12
// characters are kept as the key's prefix, shown in lists and in the audit
// trail, so a key can be recognised and revoked without being seen again.
// A key belongs to one tenant and names one principal; it acts in that
// tenant only.
//
// # Roles
//
// reader (every read, payloads included), editor (plus create, update,
// delete, pause, resume, trigger, cancel, apply) and admin (plus grants,
// dead-letter replay, keys, audit). A principal's role on a job is the
// most permissive of:
//
//   - its key's tenant-wide role (which may be "none": the key acts only
//     where it was granted),
//   - its grant on the job's namespace,
//   - its grant on the job itself (by name, so it may precede the job).
//
// Grants belong to the principal (every key of it), not to a key. A call
// on the whole tenant (keys, audit, replaying every dead letter) takes the
// key's tenant-wide role alone. A principal without a tenant-wide role
// lists only what its grants cover (job.Scope). A system admin key may
// also create and list tenants and create keys in any tenant; it reads
// nothing of another tenant.
//
// # Caching
//
// A verified key is cached with its principal's grants for CacheTTL (10 s
// by default). A key revoked, or a grant changed, through this Service
// takes effect here at once; on other servers, within their CacheTTL.
package access
