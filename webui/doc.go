// Package webui serves Orrery's web UI: server-rendered pages (html/template)
// on the API's own address, for jobs, runs (the DAG drawn as inline SVG and
// updated live over server-sent events), dead letters, the cluster and the
// audit trail.
//
// The UI holds no authority of its own. A visitor signs in with an API key
// (a session cookie: HttpOnly, SameSite=Strict, Secure behind TLS; every
// form carries a CSRF token), and every page reads and acts through the
// Connect API handler, called in-process as the signed-in principal
// (api.WithPrincipal): the API's policy, tenancy and audit apply
// unchanged, and a button the principal's role would refuse is not drawn.
//
// Pages work without JavaScript (links, forms, plain tables). JavaScript
// adds live run pages, search as you type (htmx, vendored in static/ with
// its version and licence in static/VENDORED.md) and times in the viewer's
// zone (UTC on hover).
package webui
