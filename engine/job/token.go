package job

import (
	"encoding/base64"
	"encoding/json"
)

// Page tokens are opaque to clients: base64 of the last row's sort key.
func encodeToken(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeToken(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return errBadToken
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errBadToken
	}
	return nil
}
