package api_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// apiKeyJSON is an APIKey as Connect's JSON shows it.
type apiKeyJSON struct {
	ID        string `json:"id"`
	Prefix    string `json:"prefix"`
	Principal string `json:"principal"`
	Role      string `json:"role"`
	CreatedAt string `json:"createdAt"`
	CreatedBy string `json:"createdBy"`
	ExpiresAt string `json:"expiresAt"`
	RevokedAt string `json:"revokedAt"`
}

// An admin creates a key over the API; it works at once with its role
// (reads, not writes), is listed with its prefix and never its secret,
// and, revoked, is Unauthenticated at once on this server. Creation and
// revocation are in the audit trail.
func TestAdminManagesKeysOverTheAPI(t *testing.T) {
	t.Parallel()
	base, keys := authServer(t)
	rpc := func(key, method, body string) (string, string) {
		t.Helper()
		return callBody(t, base+"/orrery.v1.AccessService/"+method, key, body)
	}
	code, body := rpc(keys["admin"], "CreateAPIKey", `{"principal":"dashboard","role":"reader","expires_in":"3600s"}`)
	if code != "" {
		t.Fatalf("create as admin: %s %s", code, body)
	}
	var created struct {
		Secret string     `json:"secret"`
		Key    apiKeyJSON `json:"key"`
	}
	if err := json.Unmarshal([]byte(body), &created); err != nil {
		t.Fatal(err)
	}
	k := created.Key
	if !strings.HasPrefix(created.Secret, "ork_") || len(k.Prefix) != 12 || !strings.HasPrefix(created.Secret, k.Prefix) ||
		k.Principal != "dashboard" || k.Role != "reader" || k.ID == "" || k.ExpiresAt == "" || k.CreatedAt == "" ||
		!strings.HasPrefix(k.CreatedBy, "admin (ork_") {
		t.Fatalf("created: %s", body)
	}

	// The new key reads, and cannot write.
	if code, body := callBody(t, base+"/orrery.v1.JobService/ListJobs", created.Secret, `{}`); code != "" {
		t.Fatalf("read with the new reader key: %s %s", code, body)
	}
	job := `{"metadata":{"name":"x","namespace":"team"},"spec":{"schedule":{"cron":"@daily"},"run":{"handler":"h"}}}`
	if code, _ := callBody(t, base+"/orrery.v1.JobService/CreateJob", created.Secret, job); code != "permission_denied" {
		t.Fatalf("write with the new reader key: %q, want permission_denied", code)
	}

	// Listed with prefixes and roles, never a secret or a hash.
	code, body = rpc(keys["admin"], "ListAPIKeys", `{}`)
	if code != "" {
		t.Fatalf("list: %s %s", code, body)
	}
	var listed struct {
		Keys []apiKeyJSON `json:"keys"`
	}
	if err := json.Unmarshal([]byte(body), &listed); err != nil {
		t.Fatal(err)
	}
	got := map[string]apiKeyJSON{}
	for _, l := range listed.Keys {
		got[l.Principal] = l
	}
	if len(listed.Keys) != 7 || got["worker"].Role != "worker" || got["publisher"].Role != "publisher" || got["dashboard"].Prefix != k.Prefix || got["reader"].Role != "reader" || got["admin"].Role != "admin" || got["other"].Prefix != "" {
		t.Fatalf("list: %s", body)
	}
	for _, secret := range []string{created.Secret, keys["reader"], keys["editor"], keys["admin"]} {
		if strings.Contains(body, secret) || strings.Contains(body, secret[12:20]) {
			t.Fatalf("list shows a secret: %s", body)
		}
	}
	if strings.Contains(strings.ToLower(body), "hash") {
		t.Fatalf("list shows hashes: %s", body)
	}

	// Revoked: refused at once (the cache entry made by the read above is dropped).
	if code, body := rpc(keys["admin"], "RevokeAPIKey", `{"prefix":"`+k.Prefix+`"}`); code != "" {
		t.Fatalf("revoke: %s %s", code, body)
	}
	if code, _ := callBody(t, base+"/orrery.v1.JobService/ListJobs", created.Secret, `{}`); code != "unauthenticated" {
		t.Fatalf("the revoked key: %q, want unauthenticated", code)
	}
	if code, _ := rpc(keys["admin"], "RevokeAPIKey", `{"prefix":"`+k.Prefix+`"}`); code != "not_found" {
		t.Fatalf("revoke twice: %q, want not_found", code)
	}
	_, body = rpc(keys["admin"], "ListAPIKeys", `{}`)
	_ = json.Unmarshal([]byte(body), &listed)
	for _, l := range listed.Keys {
		if (l.RevokedAt != "") != (l.Prefix == k.Prefix) {
			t.Errorf("after revocation: %+v", l)
		}
	}

	// Both are audited, by the admin's key.
	code, body = callBody(t, base+"/orrery.v1.AuditService/ListAudit", keys["admin"], `{"target_kind":"api_key","target_name":"`+k.Prefix+`"}`)
	var audit struct {
		Entries []struct {
			Actor, Action string
		} `json:"entries"`
	}
	_ = json.Unmarshal([]byte(body), &audit)
	if code != "" || len(audit.Entries) != 2 || audit.Entries[0].Action != "revoke_api_key" || audit.Entries[1].Action != "create_api_key" ||
		!strings.HasPrefix(audit.Entries[0].Actor, "admin (ork_") || audit.Entries[1].Actor != audit.Entries[0].Actor {
		t.Fatalf("audit: %s %s", code, body)
	}

	// An admin may revoke the key it calls with; it stops at once.
	_, body = rpc(keys["admin"], "ListAPIKeys", `{}`)
	_ = json.Unmarshal([]byte(body), &listed)
	adminPrefix := keys["admin"][:12]
	if code, body := rpc(keys["admin"], "RevokeAPIKey", `{"prefix":"`+adminPrefix+`"}`); code != "" {
		t.Fatalf("revoke its own key: %s %s", code, body)
	}
	if code, _ := rpc(keys["admin"], "ListAPIKeys", `{}`); code != "unauthenticated" {
		t.Fatalf("the admin's own revoked key: %q, want unauthenticated", code)
	}
}

// Only admins manage keys; another tenant's admin sees and revokes none of
// this tenant's; bad arguments are InvalidArgument naming the field.
func TestKeyManagementIsAdminsOfTheTenant(t *testing.T) {
	t.Parallel()
	base, keys := authServer(t)
	rpc := func(key, method, body string) (string, string) {
		t.Helper()
		return callBody(t, base+"/orrery.v1.AccessService/"+method, key, body)
	}
	for _, who := range []string{"reader", "editor"} {
		for _, c := range []struct{ method, body string }{
			{"CreateAPIKey", `{"principal":"p","role":"reader"}`},
			{"ListAPIKeys", `{}`},
			{"RevokeAPIKey", `{"prefix":"` + keys["admin"][:12] + `"}`},
		} {
			if code, body := rpc(keys[who], c.method, c.body); code != "permission_denied" {
				t.Errorf("%s as %s: %q %s, want permission_denied", c.method, who, code, body)
			}
		}
	}

	// Another tenant's admin: lists only its own keys, revokes none of ours.
	code, body := rpc(keys["other"], "ListAPIKeys", `{}`)
	var listed struct {
		Keys []apiKeyJSON `json:"keys"`
	}
	_ = json.Unmarshal([]byte(body), &listed)
	if code != "" || len(listed.Keys) != 2 || listed.Keys[0].Principal != "other" || listed.Keys[1].Principal != "other-worker" {
		t.Fatalf("list as another tenant: %s %s", code, body)
	}
	for _, name := range []string{"reader", "admin"} {
		if code, body := rpc(keys["other"], "RevokeAPIKey", `{"prefix":"`+keys[name][:12]+`"}`); code != "not_found" {
			t.Errorf("revoke this tenant's %s key as another tenant: %q %s, want not_found", name, code, body)
		}
	}
	if code, _ := rpc(keys["other"], "RevokeAPIKey", `{"prefix":"ork_nonesuch"}`); code != "not_found" {
		t.Errorf("revoke an unknown prefix: %q, want not_found", code)
	}
	if code, body := callBody(t, base+"/orrery.v1.JobService/ListJobs", keys["reader"], `{}`); code != "" {
		t.Fatalf("this tenant's reader key after the other tenant's revocations: %s %s", code, body)
	}
	// A key made by another tenant's admin is in that tenant.
	code, body = rpc(keys["other"], "CreateAPIKey", `{"principal":"theirs","role":"editor"}`)
	if code != "" {
		t.Fatalf("create as another tenant: %s %s", code, body)
	}
	_, body = rpc(keys["admin"], "ListAPIKeys", `{}`)
	if strings.Contains(body, "theirs") {
		t.Fatalf("this tenant lists another tenant's key: %s", body)
	}

	for _, c := range []struct{ body, field string }{
		{`{"principal":"p","role":"owner"}`, "role"},
		{`{"principal":"p"}`, "role"},
		{`{"principal":"","role":"reader"}`, "principal"},
		{`{"principal":"` + strings.Repeat("p", 201) + `","role":"reader"}`, "principal"},
		{`{"principal":"p","role":"reader","expiresIn":"-60s"}`, "expiresIn"},
	} {
		code, body := rpc(keys["admin"], "CreateAPIKey", c.body)
		var e struct{ Message string }
		_ = json.Unmarshal([]byte(body), &e)
		if code != "invalid_argument" || !strings.HasPrefix(e.Message, c.field+":") {
			t.Errorf("create %s: %q %s, want invalid_argument naming %s", c.body, code, body, c.field)
		}
	}
	if code, body := rpc(keys["admin"], "RevokeAPIKey", `{}`); code != "invalid_argument" || !strings.Contains(body, "prefix") {
		t.Errorf("revoke without a prefix: %q %s", code, body)
	}
}
