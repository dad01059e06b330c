package store

import (
	"encoding/base64"
	"encoding/json"
	"errors"
)

// ErrBadPageToken: a page token that this server did not hand out.
var ErrBadPageToken = errors.New("bad page token")

// EncodePageToken makes an opaque page token of a keyset position (the
// last row's sort key): clients pass it back, never read it.
func EncodePageToken(pos any) string {
	b, _ := json.Marshal(pos)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodePageToken reads a token made by EncodePageToken into pos.
func DecodePageToken(token string, pos any) error {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || json.Unmarshal(b, pos) != nil {
		return ErrBadPageToken
	}
	return nil
}

// NextPage trims rows, fetched with a limit of size+1, to one page and
// returns the token of the next page, made of key(last row), or "" when
// this page is the last.
func NextPage[T any](rows []T, size int, key func(T) any) ([]T, string) {
	if len(rows) <= size {
		return rows, ""
	}
	rows = rows[:size]
	return rows, EncodePageToken(key(rows[size-1]))
}

// NextBudgetedPage is NextPage for a query that also cut its page at a
// byte budget: pageRows is how many rows the page held before the cut
// (the query's count over the page), so a page cut short still has a next
// one, after its last row.
func NextBudgetedPage[T any](rows []T, size int, pageRows int64, key func(T) any) ([]T, string) {
	rows, next := NextPage(rows, size, key)
	if next == "" && len(rows) > 0 && pageRows > int64(len(rows)) {
		next = EncodePageToken(key(rows[len(rows)-1]))
	}
	return rows, next
}
