// Package restdoc names the REST API's paths as its OpenAPI document
// does, for the server (its errors) and for the tool that writes the
// document (tools/openapi): one place for the names.
package restdoc

import "strings"

// pathParams name the path parameters as REST users name them, one name
// for one thing across the document (a job's id is {id} wherever a path
// names a job by it): the protos' field paths ({ref.id}, {job.id}) are
// their request messages' and differ from method to method, and tools that
// route by the document (Prism) cannot match a name with a dot. The URLs
// are the same: only the names change.
var pathParams = []struct{ from, to string }{
	{"/backfills/{id}", "/backfills/{backfill_id}"}, // first: the job's id becomes {id}
	{"/runs/{id}", "/runs/{run_id}"},
	{"{ref.id}", "{id}"}, {"{job.id}", "{id}"},
	{"{ref.namespace}", "{namespace}"}, {"{job.namespace}", "{namespace}"},
	{"{ref.name}", "{name}"}, {"{job.name}", "{name}"},
}

// Path names a google.api.http path template's parameters as the
// OpenAPI document does (pathParams), and returns the renamings, old name
// to new.
func Path(path string) (string, map[string]string) {
	names := map[string]string{}
	for _, p := range pathParams {
		if strings.Contains(path, p.from) {
			path = strings.Replace(path, p.from, p.to, 1)
			from := p.from[strings.IndexByte(p.from, '{')+1 : strings.IndexByte(p.from, '}')]
			names[from] = p.to[strings.IndexByte(p.to, '{')+1 : strings.IndexByte(p.to, '}')]
		}
	}
	return path, names
}

// EnumPrefix is the prefix an enum's value names share, up to an
// underscore (JOB_STATUS_ for JOB_STATUS_ACTIVE and JOB_STATUS_PAUSED):
// what a value's short name (active) leaves out, in a query and in the
// document.
func EnumPrefix(names []string) string {
	if len(names) < 2 {
		return ""
	}
	p := names[0]
	for _, n := range names[1:] {
		for !strings.HasPrefix(n, p) {
			p = p[:len(p)-1]
		}
	}
	return p[:strings.LastIndexByte(p, '_')+1]
}
