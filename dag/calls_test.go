package dag

import (
	"strings"
	"testing"
)

const jobStep = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: billing, namespace: finance}
spec:
  schedule: {cron: "0 9 1 * *"}
  params:
    month: {type: string, default: "2026-11"}
  steps:
    - name: prep
      run: {handler: prep}
    - name: invoice
      needs: [prep]
      run:
        job:
          name: invoice-run
          params: {month: "${{ params.month }}", rows: "${{ steps.prep.output.rows }}"}
    - name: mail
      needs: [invoice]
      run: {handler: mail}
      payload: {total: "${{ steps.invoice.output.outputs.sum.total }}"}
`

func TestJobStepDecodes(t *testing.T) {
	r := decodeOne(t, jobStep)
	j := r.Spec.Steps[1].Run.Job
	if j == nil || j.Name != "invoice-run" || j.Namespace != "finance" {
		t.Fatalf("invoice's run.job decoded as %+v (the namespace defaults to the job's)", j)
	}
	x, es := CompileExprs(&r.Spec)
	if len(es) > 0 {
		t.Fatal(es)
	}
	if got := x.Step("invoice").Reads.Steps; len(got) != 1 || got[0] != "prep" {
		t.Errorf("invoice's params read %v", got)
	}
}

func TestJobStepErrorsNameTheField(t *testing.T) {
	tests := []struct{ name, old, new, want string }{
		{"two executors", `      run:` + "\n" + `        job:`, `      run:` + "\n" + `        handler: x` + "\n" + `        job:`,
			`spec.steps[1].run: give exactly one executor: http, command, handler, worker or job`},
		{"bad name", `name: invoice-run`, `name: "Invoice Run"`, `spec.steps[1].run.job.name:`},
		{"bad namespace", `name: invoice-run`, `name: invoice-run` + "\n" + `          namespace: "a/b"`, `spec.steps[1].run.job.namespace:`},
		{"params a list", `params: {month: "${{ params.month }}", rows: "${{ steps.prep.output.rows }}"}`, `params: [1, 2]`,
			`spec.steps[1].run.job.params: is not a mapping of param names to values`},
		{"params read a later step", `rows: "${{ steps.prep.output.rows }}"`, `rows: "${{ steps.mail.output }}"`,
			`spec.steps[1].run.job.params.rows:`},
		{"retry", `      needs: [prep]` + "\n", `      needs: [prep]` + "\n" + `      retry: {max_attempts: 3}` + "\n",
			`spec.steps[1].retry: a step that runs a job is retried by retrying its run`},
		{"timeout", `      needs: [prep]` + "\n", `      needs: [prep]` + "\n" + `      timeout: 1m` + "\n",
			`spec.steps[1].timeout: a step that runs a job ends with its child run`},
		{"payload", `      needs: [prep]` + "\n", `      needs: [prep]` + "\n" + `      payload: {a: 1}` + "\n",
			`spec.steps[1].payload: a step that runs a job gives it params`},
		{"for_each", `      needs: [prep]` + "\n", `      needs: [prep]` + "\n" + `      for_each: ${{ [1] }}` + "\n",
			`spec.steps[1].for_each: a step that runs a job cannot fan out`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(jobStep, tt.old) {
				t.Fatalf("the job has no %q", tt.old)
			}
			_, es := Decode("f.yaml", []byte(strings.Replace(jobStep, tt.old, tt.new, 1)))
			if len(es) == 0 || !strings.Contains(es.Error(), tt.want) {
				t.Errorf("got %v\nwant %s", es, tt.want)
			}
		})
	}
}
