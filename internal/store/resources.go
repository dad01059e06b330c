package store

import (
	"encoding/json"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/orrery-dev/orrery/dag/resources"
)

// CapacityColumns are a worker's capacity as workers.cap_* keep it: all
// NULL when it declares none (nil).
func CapacityColumns(v *resources.Vector) (cpu, memory, gpu pgtype.Int8, custom []byte) {
	if v == nil {
		return
	}
	if len(v.Custom) > 0 {
		custom, _ = json.Marshal(v.Custom)
	}
	return pgtype.Int8{Int64: v.CPU, Valid: true}, pgtype.Int8{Int64: v.Memory, Valid: true}, pgtype.Int8{Int64: v.GPU, Valid: true}, custom
}
