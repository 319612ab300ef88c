package dataplane

import (
	"fmt"
	"testing"

	"github.com/jmcluster/jmcluster/testkit/benchgoal"
)

// The cost of records of bytes: records/s through one TM pair's Exchange stream (one
// channel, real gRPC over loopback) of records with an 11-byte key, an event time and values
// of 100 and 1000 bytes, against the numeric records every job carried before (8-byte key
// and value, as int64 on the wire), in the same run.

// BenchmarkBytesRecords: records/s through one channel by value size (0: numeric records).
func BenchmarkBytesRecords(b *testing.B) {
	prod, cons := pairTMs(b)
	for _, size := range []int{0, 100, 1000} {
		b.Run(fmt.Sprintf("value-%d", size), func(b *testing.B) {
			rate := muxThroughputOf(b, prod, cons, 1, 1, max(b.N, 1000), size)
			b.ReportMetric(rate, "records/s")
			kv := size + 11
			if size == 0 {
				kv = 16
			}
			b.ReportMetric(rate*float64(kv)/1e6, "MB/s")
		})
	}
}

// TestGoalBytesRecords (JMC_GOALS=1, `make bench-short`): records/s of 100-byte values through
// one TM pair against the numeric records, in the same run (each measured three times in
// turn, the best kept). Goal: at least 0.7x.
func TestGoalBytesRecords(t *testing.T) {
	benchgoal.Skip(t)
	const records = 1_000_000
	prod, cons := pairTMs(t)
	var numeric, bytes100, bytes1000 float64
	for range 3 {
		numeric = max(numeric, muxThroughputOf(t, prod, cons, 1, 1, records, 0))
		bytes100 = max(bytes100, muxThroughputOf(t, prod, cons, 1, 1, records, 100))
		bytes1000 = max(bytes1000, muxThroughputOf(t, prod, cons, 1, 1, records/4, 1000))
	}
	t.Logf("%-28s %6.2f M records/s (1x)", "numeric (8-byte key, value)", numeric/1e6)
	t.Logf("%-28s %6.2f M records/s (%.2fx, %.0f MB/s)", "11-byte key, 100-byte value", bytes100/1e6, bytes100/numeric, bytes100*111/1e6)
	t.Logf("%-28s %6.2f M records/s (%.2fx, %.0f MB/s)", "11-byte key, 1000-byte value", bytes1000/1e6, bytes1000/numeric, bytes1000*1011/1e6)
	ratio := bytes100 / numeric
	benchgoal.Report(t, "bytes-records-100-vs-numeric", ratio, 0.7, ratio >= 0.7, "x")
}
