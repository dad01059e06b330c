package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// apiTools is where `make apicheck` installs the npm tools users bring to
// an API (tools/apicheck): ORRERY_APICHECK, or the repository's.
func apiTools(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("ORRERY_APICHECK")
	if dir == "" {
		dir, _ = filepath.Abs("../tools/apicheck")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".bin", "prism")); err != nil {
		t.Fatalf("the API tools are not installed in %s: run `make apicheck` (make test does): %v", dir, err)
	}
	return dir
}

// tool runs one of the npm tools, without telemetry or update checks
// (nothing but 127.0.0.1 is reachable), and answers what it wrote to its
// output and, on an error, to its error output too.
func tool(t *testing.T, ctx context.Context, dir, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "node_modules", ".bin", name), args...)
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true",
		"NO_UPDATE_NOTIFIER=1", "DISABLE_TELEMETRY=1", "NODE_NO_WARNINGS=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

// TestOpenAPIWithTheToolsUsersBring checks the document a server serves
// with what its users check it with: Spectral (spectral:oas) and Redocly
// (recommended) report no error; every operation of the REST matrix goes
// through Prism's validating proxy, which routes each one and finds no
// violation in what the server answers; and a TypeScript client generated
// from it (openapi-typescript, openapi-fetch) compiles under tsc --strict
// and runs the README's flow.
func TestOpenAPIWithTheToolsUsersBring(t *testing.T) {
	dir := apiTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	base, keys := authServer(t)
	work := t.TempDir()
	res, err := http.Get(base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(res.Body)
	res.Body.Close()
	doc := filepath.Join(work, "openapi.json")
	if err := os.WriteFile(doc, served, 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("Spectral", func(t *testing.T) {
		rules := filepath.Join(work, ".spectral.yaml")
		if err := os.WriteFile(rules, []byte("extends: [\"spectral:oas\"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := tool(t, ctx, dir, "spectral", "lint", doc, "--ruleset", rules, "--format", "json", "--quiet", "--fail-severity", "error")
		var problems []struct {
			Code     string
			Message  string
			Path     []any
			Severity int
		}
		i := strings.IndexByte(out, '[')
		if i < 0 || json.NewDecoder(strings.NewReader(out[i:])).Decode(&problems) != nil {
			t.Fatalf("spectral: %v: %s", err, out)
		}
		warnings := 0
		for _, p := range problems {
			if p.Severity == 0 {
				t.Errorf("spectral: %s: %s at %v", p.Code, p.Message, p.Path)
			} else {
				warnings++
			}
		}
		t.Logf("spectral: %d problems, %d of them warnings", len(problems), warnings)
	})

	t.Run("Redocly", func(t *testing.T) {
		out, err := tool(t, ctx, dir, "redocly", "lint", doc, "--extends", "recommended", "--format", "json")
		var report struct {
			Totals   struct{ Errors, Warnings int }
			Problems []struct {
				RuleID, Severity, Message string
				Location                  []struct{ Pointer string }
			}
		}
		i := strings.Index(out, "{\n")
		if i < 0 || json.NewDecoder(strings.NewReader(out[i:])).Decode(&report) != nil {
			t.Fatalf("redocly: %v: %s", err, out)
		}
		for _, p := range report.Problems {
			if p.Severity == "error" {
				t.Errorf("redocly: %s: %s at %v", p.RuleID, p.Message, p.Location)
			}
		}
		t.Logf("redocly: %d errors, %d warnings", report.Totals.Errors, report.Totals.Warnings)
	})

	t.Run("Prism", func(t *testing.T) {
		// A server of its own: the matrix creates what it names.
		upstream, keys := authServer(t)
		proxy := startPrism(t, ctx, dir, doc, upstream)
		restMatrix(t, proxy, keys, func(t *testing.T, r route, req *http.Request, resp *http.Response, what string) {
			t.Helper()
			v := resp.Header.Get("sl-violations")
			if v == "" {
				return
			}
			var violations []struct {
				Location []string
				Message  string
				Code     any
				Severity string
			}
			if err := json.Unmarshal([]byte(v), &violations); err != nil {
				t.Errorf("%s %s%s: sl-violations %q: %v", r.method, req.URL.Path, what, v, err)
				return
			}
			for _, x := range violations {
				// A request refused on purpose (no key) breaks the
				// document's rules: only the answer must keep them.
				if what != "" && len(x.Location) > 0 && x.Location[0] == "request" {
					continue
				}
				t.Errorf("%s %s%s: Prism: %s at %s", r.method, req.URL.Path, what, x.Message, strings.Join(x.Location, "."))
			}
		})
	})

	t.Run("TypeScript", func(t *testing.T) {
		ts := filepath.Join(work, "ts")
		if err := os.MkdirAll(ts, 0o755); err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile(filepath.Join(dir, "readme-flow.ts"))
		if err != nil {
			t.Fatal(err)
		}
		for name, content := range map[string]string{
			"readme-flow.ts": string(src),
			"package.json":   `{"type": "module"}`,
			"tsconfig.json": `{"compilerOptions": {"strict": true, "noEmitOnError": true, "target": "ES2022",
				"module": "NodeNext", "moduleResolution": "NodeNext", "outDir": "out", "types": []},
				"files": ["readme-flow.ts"]}`,
		} {
			if err := os.WriteFile(filepath.Join(ts, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(ts, "node_modules")); err != nil {
			t.Fatal(err)
		}
		if out, err := tool(t, ctx, dir, "openapi-typescript", doc, "--output", filepath.Join(ts, "schema.d.ts")); err != nil {
			t.Fatalf("openapi-typescript: %v\n%s", err, out)
		}
		if out, err := tool(t, ctx, dir, "tsc", "-p", ts); err != nil {
			t.Fatalf("tsc --strict: %v\n%s", err, out)
		}
		cmd := exec.CommandContext(ctx, "node", filepath.Join(ts, "out", "readme-flow.js"), base, keys["admin"])
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "readme flow: ok") {
			t.Fatalf("the README flow in TypeScript: %v\n%s", err, out)
		}
	})
}

// startPrism runs Prism's validating proxy in front of upstream and
// answers its URL once it listens.
func startPrism(t *testing.T, ctx context.Context, dir, doc, upstream string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "node_modules", ".bin", "prism"), "proxy", doc, upstream,
		"--host", "127.0.0.1", "--port", fmt.Sprint(port), "--errors", "false")
	cmd.Env = append(os.Environ(), "NO_UPDATE_NOTIFIER=1", "NODE_NO_WARNINGS=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	// Prism says when it listens; its log is kept for a failure.
	ready, ended := make(chan struct{}), make(chan string)
	go func() {
		var log strings.Builder
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "Prism is listening") && ready != nil {
				close(ready)
				ready = nil
			}
		}
		ended <- log.String()
	}()
	select {
	case <-ready:
	case log := <-ended:
		t.Fatalf("prism ended: %s", log)
	case <-ctx.Done():
		t.Fatal("prism did not start")
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}
