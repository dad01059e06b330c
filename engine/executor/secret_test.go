package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// No t.Parallel here: the cases use t.Setenv.
func TestResolve(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := write("plain", "s3cr3t-file")
	lf := write("lf", "s3cr3t-lf\n")
	crlf := write("crlf", "s3cr3t-crlf\r\n\r\n")
	multi := write("multi", "line1\nline2\n")
	empty := write("empty", "")
	t.Setenv("ORRERY_TEST_SECRET_TOKEN", "s3cr3t-env")
	t.Setenv("ORRERY_TEST_SECRET_EMPTY", "")
	t.Setenv("ORRERY_TEST_SECRET_MISSING", "") // so that the variable is restored after the test
	os.Unsetenv("ORRERY_TEST_SECRET_MISSING")

	// Namespace etl may read these variables and the files in dir.
	policy := &SecretPolicy{Env: map[string][]string{"acme/etl": {"ORRERY_TEST_SECRET_*"}}, Dirs: map[string][]string{"acme/etl": {dir}}}

	tests := []struct {
		name    string
		in      string
		want    string
		wantErr string // substring of the error; "" means no error
	}{
		{name: "plain value passes through", in: "Bearer abc", want: "Bearer abc"},
		{name: "empty value passes through", in: "", want: ""},
		{name: "reference not at the start is not resolved", in: "Bearer secret://env/ORRERY_TEST_SECRET_TOKEN", want: "Bearer secret://env/ORRERY_TEST_SECRET_TOKEN"},
		{name: "prefix is case sensitive", in: "SECRET://env/ORRERY_TEST_SECRET_TOKEN", want: "SECRET://env/ORRERY_TEST_SECRET_TOKEN"},
		{name: "env variable", in: "secret://env/ORRERY_TEST_SECRET_TOKEN", want: "s3cr3t-env"},
		{name: "env variable set but empty", in: "secret://env/ORRERY_TEST_SECRET_EMPTY", want: ""},
		{name: "env variable missing", in: "secret://env/ORRERY_TEST_SECRET_MISSING", wantErr: "environment variable ORRERY_TEST_SECRET_MISSING is not set"},
		{name: "env without a name", in: "secret://env/", wantErr: "may not read this environment variable"},
		{name: "env without a slash", in: "secret://env", wantErr: "may not read this environment variable"},
		{name: "file", in: "secret://file" + plain, want: "s3cr3t-file"},
		{name: "file with a doubled slash", in: "secret://file/" + plain, want: "s3cr3t-file"},
		{name: "file trailing newline trimmed", in: "secret://file" + lf, want: "s3cr3t-lf"},
		{name: "file trailing CRLFs trimmed", in: "secret://file" + crlf, want: "s3cr3t-crlf"},
		{name: "file inner newlines kept", in: "secret://file" + multi, want: "line1\nline2"},
		{name: "empty file", in: "secret://file" + empty, want: ""},
		{name: "file missing", in: "secret://file" + filepath.Join(dir, "missing"), wantErr: "cannot read the file"},
		{name: "file is a directory", in: "secret://file" + dir, wantErr: "cannot read the file"},
		{name: "unknown kind", in: "secret://vault/db/password", wantErr: "use secret://env/NAME or secret://file/PATH"},
		{name: "no kind", in: "secret://", wantErr: "use secret://env/NAME or secret://file/PATH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := policy.resolve("acme", "etl", tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("resolve(%q) = %q, nil; want an error containing %q", tt.in, got, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("resolve(%q) error = %q, want it to contain %q", tt.in, err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.in) {
					t.Errorf("resolve(%q) error = %q, want it to name the reference", tt.in, err)
				}
				if got != "" {
					t.Errorf("resolve(%q) returned %q with an error, want \"\"", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("resolve(%q) error = %v, want %q", tt.in, err, tt.want)
			}
			if got != tt.want {
				t.Fatalf("resolve(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// A file that cannot be read must not leak the OS error (which could name
// more than the reference) nor any content.
func TestResolveFileErrorHidesDetails(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "nope")
	_, err := (&SecretPolicy{Dirs: map[string][]string{"acme/*": {filepath.Dir(p)}}}).resolve("acme", "etl", "secret://file"+p)
	if err == nil {
		t.Fatal("resolve of a missing file succeeded")
	}
	if strings.Contains(err.Error(), "no such file") {
		t.Errorf("error %q carries the OS error", err)
	}
}
