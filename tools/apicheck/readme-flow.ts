// The README's REST flow through a client generated from the served
// OpenAPI document (openapi-typescript types, openapi-fetch calls). It is
// compiled with `tsc --strict` and run by api/tools_test.go against a real
// server: node out/readme-flow.js URL KEY.
import createClient from "openapi-fetch";
import type { paths, components } from "./schema.js";

declare const process: { argv: string[]; exitCode?: number };

type Job = components["schemas"]["Job"];

function check(ok: boolean, what: string): asserts ok {
  if (!ok) throw new Error(what);
}

async function main(baseUrl: string, key: string): Promise<void> {
  const client = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${key}` } });

  const created = await client.POST("/api/v1/jobs", {
    body: {
      metadata: { namespace: "analytics", name: "nightly-report", labels: { team: "data" } },
      spec: {
        schedule: { cron: "0 2 * * *", timezone: "Europe/Berlin" },
        run: { command: { argv: ["/bin/echo", "report"] } },
      },
    },
  });
  check(created.response.status === 201 && created.data !== undefined, `create: ${created.response.status} ${JSON.stringify(created.error)}`);
  const job: Job = created.data.job; // required: no undefined to handle
  const id: string = job.id;
  check(created.response.headers.get("Location") === `/api/v1/jobs/${id}`, "create: Location");

  // A trigger takes no body; the same Idempotency-Key answers the same run.
  const runs: string[] = [];
  for (let i = 0; i < 2; i++) {
    const t = await client.POST("/api/v1/jobs/{id}/trigger", {
      params: { path: { id }, header: { "Idempotency-Key": "nightly-report-2026-11-28" } },
    });
    check(t.data !== undefined, `trigger: ${t.response.status} ${JSON.stringify(t.error)}`);
    runs.push(t.data.run.id);
  }
  check(runs[0] === runs[1], `a replayed trigger started another run: ${runs}`);

  const run = await client.GET("/api/v1/runs/{run_id}", { params: { path: { run_id: runs[0] } } });
  check(run.data !== undefined && run.data.run.jobId === id, `get run: ${run.response.status}`);

  const failed = await client.GET("/api/v1/jobs/{id}/runs", {
    params: { path: { id }, query: { status: "failed", since: "2026-11-27T00:00:00Z" } },
  });
  check(failed.data !== undefined && Array.isArray(failed.data.runs), `list runs: ${failed.response.status}`);

  const byName = await client.GET("/api/v1/namespaces/{namespace}/jobs/{name}", {
    params: { path: { namespace: "analytics", name: "nightly-report" } },
  });
  check(byName.data !== undefined && byName.data.job.id === id, `get by name: ${byName.response.status}`);

  const labelled = await client.GET("/api/v1/jobs", { params: { query: { label: ["team:data"], status: "active" } } });
  check(labelled.data !== undefined && labelled.data.jobs.some((j) => j.id === id), `list by label: ${labelled.response.status}`);

  const paused = await client.POST("/api/v1/jobs/{id}:pause", { params: { path: { id } } });
  check(paused.data !== undefined && paused.data.job.status === "JOB_STATUS_PAUSED", `pause: ${paused.response.status}`);

  // An error is the document's Status, with the field at fault.
  const bad = await client.GET("/api/v1/jobs", { params: { query: { pageSize: 900 } } });
  check(bad.error !== undefined && bad.response.status === 422, `a page past the bound: ${bad.response.status}`);
  const message: string = bad.error.message;
  check(message.startsWith("pageSize:"), `the error names ${message}`);

  const gone = await client.DELETE("/api/v1/jobs/{id}", { params: { path: { id } } });
  check(gone.data !== undefined && gone.data.job.deleteTime !== undefined, `delete: ${gone.response.status}`);
  console.log("readme flow: ok");
}

main(process.argv[2], process.argv[3]).catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
