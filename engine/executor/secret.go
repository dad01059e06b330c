package executor

import (
	"fmt"
	"os"
	"strings"
)

// Secret references: secret://env/NAME and secret://file/PATH. They are
// resolved on the worker when the attempt runs; their values appear in no
// payload, log, error or audit row.
const secretPrefix = "secret://"

// resolve returns v with a secret reference replaced by its value.
func resolve(v string) (string, error) {
	ref, ok := strings.CutPrefix(v, secretPrefix)
	if !ok {
		return v, nil
	}
	kind, name, _ := strings.Cut(ref, "/")
	switch kind {
	case "env":
		val, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("secret %s: environment variable %s is not set on this worker", v, name)
		}
		return val, nil
	case "file":
		b, err := os.ReadFile("/" + strings.TrimPrefix(name, "/"))
		if err != nil {
			return "", fmt.Errorf("secret %s: cannot read the file on this worker", v)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return "", fmt.Errorf("secret %s: use secret://env/NAME or secret://file/PATH", v)
}

func toString(v any) string { return fmt.Sprint(v) }

func itoa(n int) string { return fmt.Sprint(n) }
