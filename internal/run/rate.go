package run

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Step rate limits: a released task of a step with rate_limit carries its
// key (release.go writes it, RateTasks), and the admission pass spends its
// tokens (package dispatch, rates.go). What a task waiting for its token
// says is here.

// ReasonRateLimit starts the wait reason of a task waiting for its rate
// limit's token: "rate limit vendor-x 100/1m, next token in 0.6 s".
const ReasonRateLimit = "rate limit"

// RateWait is the wait reason of a task of key, limit tokens per perMs
// ms, whose token comes in in.
func RateWait(key string, limit pgtype.Int4, perMs pgtype.Int8, in time.Duration) string {
	per := time.Duration(perMs.Int64) * time.Millisecond
	return fmt.Sprintf("%s %s %d/%s, next token in %.1f s", ReasonRateLimit, key, limit.Int32, shortDuration(per), in.Seconds())
}

// shortDuration writes d as a rate limit's period or a debounce's is
// written: 1m, 1h30m, 10s (not 1m0s).
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
