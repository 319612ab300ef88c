package operator

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/benchgoal"
	"github.com/jmcluster/jmcluster/transport/pb"
	"github.com/jmcluster/jmcluster/wasmhost"
)

// wasmRecords are 1024 records of 100 bytes (a 10-byte key, a 90-byte value).
func wasmRecords() []Record {
	in := make([]Record, 1024)
	for i := range in {
		in[i] = Record{Key: fmt.Appendf(nil, "user-%05d", i), Value: fmt.Appendf(nil, "%090d", i*7919), Time: int64(i)}
	}
	return in
}

// perRecord runs op over n records (a snapshot at the end hands on the last batch) and
// returns the time per record.
func perRecord(tb testing.TB, op *pb.Operator, in []Record, n int) time.Duration {
	o, err := New(op, Info{Vertex: "v", Artifact: artifacts})
	if err != nil {
		tb.Fatal(err)
	}
	if err := o.Open(context.Background()); err != nil {
		tb.Fatal(err)
	}
	defer o.Close()
	emit := func(Record) error { return nil }
	start := time.Now()
	for i := range n {
		if err := o.Process(in[i&1023], emit); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := o.SnapshotState(); err != nil {
		tb.Fatal(err)
	}
	return time.Since(start) / time.Duration(n)
}

// BenchmarkWasmMap: one 100-byte record through a wasm MAP (echo: the ABI's cost; upper: the
// value changed and copied back, bytes.ToUpper allocating it; upper_fast: the same built in
// fn.Scratch, no allocation) against the built-in map over its numeric records.
func BenchmarkWasmMap(b *testing.B) {
	in := wasmRecords()
	for _, c := range []struct {
		name string
		op   *pb.Operator
	}{
		{"builtin_map", &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 2, Add: 1}}}},
		{"wasm_echo", wasmOperator("kinds", "echo", pb.WasmKind_WASM_KIND_MAP, "")},
		{"wasm_upper", wasmOperator("kinds", "upper", pb.WasmKind_WASM_KIND_MAP, "")},
		{"wasm_upper_fast", wasmOperator("kinds", "upper_fast", pb.WasmKind_WASM_KIND_MAP, "")},
	} {
		b.Run(c.name, func(b *testing.B) {
			recs := in
			if c.name == "builtin_map" {
				recs = numericRecords()
			}
			b.ReportMetric(float64(perRecord(b, c.op, recs, b.N)), "ns/record")
		})
	}
}

func numericRecords() []Record {
	in := make([]Record, 1024)
	for i := range in {
		in[i] = NumericRecord(int64(i), int64(i)*7919, 0, int64(i))
	}
	return in
}

// waitWarm polls until host has a warm instance of module sha waiting.
func waitWarm(t *testing.T, host *wasmhost.Host, sha string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for host.WarmWaiting(sha) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no warm instance of module %s waiting after a minute", sha[:12])
		}
		<-time.After(time.Millisecond)
	}
}

// cachedArtifacts serves the test modules by sha256 from memory, as a TaskManager's artifact
// cache does once it holds them (artifacts hashes every module at each fetch).
var cachedArtifacts = sync.OnceValue(func() func(context.Context, string) ([]byte, error) {
	by := map[string][]byte{}
	for _, b := range wasmModules {
		by[wasmhost.Sum(b)] = b
	}
	return func(_ context.Context, sha string) ([]byte, error) {
		if b, ok := by[sha]; ok {
			return b, nil
		}
		return nil, fmt.Errorf("no artifact %s", sha)
	}
})

// startTime is the time New and Open of op take (the operator's part of a task's start).
func startTime(tb testing.TB, op *pb.Operator) time.Duration {
	start := time.Now()
	o, err := New(op, Info{Vertex: "v", Artifact: cachedArtifacts()})
	if err != nil {
		tb.Fatal(err)
	}
	if err := o.Open(context.Background()); err != nil {
		tb.Fatal(err)
	}
	d := time.Since(start)
	_ = o.Close()
	return d
}

// TestGoalWasmMap (JMC_GOALS=1, `make bench-short`) measures the operator's part of the two
// goals of user functions, which cmd/jmnode measures at the level the goals name (a job's
// records/s, TestGoalWasmMapJob; a task's start on a TaskManager, TestGoalWasmTaskStart):
// per record, a wasm MAP over 100-byte records (upper_fast: the value in upper case, built
// without allocating; upper, the idiomatic bytes.ToUpper) against the built-in map over its
// numeric records; and the operator's start (New and Open) with its module compiled and a warm
// instance ready, cold, and built-in (docs/benchmarks.md). It logs them, without a target.
func TestGoalWasmMap(t *testing.T) {
	benchgoal.Skip(t)
	const n = 1 << 20
	builtin := &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 2, Add: 1}}}
	wasm := wasmOperator("kinds", "upper_fast", pb.WasmKind_WASM_KIND_MAP, "")
	upper := wasmOperator("kinds", "upper", pb.WasmKind_WASM_KIND_MAP, "")
	perRecord(t, wasm, wasmRecords(), 4096) // compiled and warm
	b := perRecord(t, builtin, numericRecords(), n)
	w := perRecord(t, wasm, wasmRecords(), n)
	u := perRecord(t, upper, wasmRecords(), n/4)
	t.Logf("operator, per record: built-in map %v (%.0f records/s), wasm MAP of 100-byte records upper_fast %v (%.0f records/s, %.2fx), upper (bytes.ToUpper) %v",
		b, 1e9/float64(b), w, 1e9/float64(w), float64(b)/float64(w), u)

	// A start on a TaskManager whose module is compiled and whose warm instance is ready (a
	// region restarts seconds after the previous start), and the cold start (the module's
	// _initialize in it).
	host, sha := wasmhost.Default(), wasm.GetWasm().GetArtifact()
	var sb, sw, sc time.Duration
	host.SetWarm(false)
	for range 5 {
		sc += startTime(t, wasm)
	}
	host.SetWarm(true)
	startTime(t, wasm) // cold, and makes the warm instance
	for range 5 {
		waitWarm(t, host, sha) // and the previous start's work in the background done
		sb += startTime(t, builtin)
		sw += startTime(t, wasm)
	}
	t.Logf("operator start (New and Open): built-in %v, wasm with its module compiled and a warm instance %v (%.2fx), cold (its module's start in it) %v (means of 5)",
		sb/5, sw/5, float64(sw)/float64(sb), sc/5)
}
