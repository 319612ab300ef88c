package taskmanager

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// countAtEnd counts each key's records in its keyed value and registers one timer per key;
// the timer emits (key, count). Its records carry no event time and its job no watermarks,
// so the timers fire when the input ends.
type countAtEnd struct{}

func (countAtEnd) Process(ctx *operator.Context, r operator.Record) error {
	n, _ := ctx.Int64()
	ctx.SetInt64(n + 1)
	k, _ := operator.Int64Of(ctx.Key())
	ctx.RegisterTimer(k)
	return nil
}

func (countAtEnd) OnTimer(ctx *operator.Context, _ int64) error {
	n, _ := ctx.Int64()
	return ctx.Emit(operator.Record{Key: ctx.Key(), Value: ctx.Int64Bytes(n), Time: operator.NoTimestamp})
}

// TestTransformTimersAndKeyedStateInATask: a transform's keyed values and timers work through
// a real task: source -> the counting transform (in place of map) -> checksum sink; when the
// input ends, every key's timer fires once and emits the key's count.
func TestTransformTimersAndKeyedStateInATask(t *testing.T) {
	operator.ReplaceTransform(t, "map", true, func(*pb.Operator, operator.Info) operator.Transform { return countAtEnd{} })
	jm := startJM(t)
	dir := t.TempDir()
	tm := newTM(t, "tm1", jm, func(c *Config) { c.WorkDir = dir })
	c := client(t, tm)
	const job, count, keys = "timers", 1000, 7
	mapOp := &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{}}}
	submit(t, c, 1, deploy(job, "sink", 0, 1, "sink-0", 0, checksumOp("sink.json"),
		gate("count->sink", pipelined, channel("count->sink", 0, 0, "count-0", tm.DataAddr()))))
	submit(t, c, 1, deploy(job, "count", 0, 1, "count-0", 1, mapOp,
		gate("src->count", pipelined, channel("src->count", 0, 0, "src-0", tm.DataAddr())),
		produces("count->sink", 0, 1, forward, pipelined)))
	submit(t, c, 1, source(job, "src", 0, 1, "src-0", 2, &pb.SequenceSource{Count: count, Keys: keys},
		produces("src->count", 0, 1, forward, pipelined)))
	for _, a := range []string{"src-0", "count-0", "sink-0"} {
		jm.waitState(t, a, finished)
	}
	cs, err := operator.ReadChecksum(filepath.Join(dir, "sink.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cs.Count != keys || cs.Sum != count {
		t.Fatalf("the sink got %d records summing to %d, want one per key (%d) summing to %d", cs.Count, cs.Sum, keys, count)
	}
	for k := range int64(keys) {
		want := int64(count / keys)
		if k < count%keys {
			want++
		}
		if got := cs.Keys[fmt.Sprint(k)]; got.Count != 1 || got.Sum != want {
			t.Errorf("key %d: %+v, want one record of count %d", k, got, want)
		}
	}
}

// TestFlatMapJobInATask: source (values -500..499) -> flat_map -> checksum sink through a real
// TM: the sink gets one record per decimal digit, with the digits' signs and the source's keys.
func TestFlatMapJobInATask(t *testing.T) {
	jm := startJM(t)
	dir := t.TempDir()
	tm := newTM(t, "tm1", jm, func(c *Config) { c.WorkDir = dir })
	c := client(t, tm)
	const job, start, count, keys = "digits", -500, 1000, 10
	flatMap := &pb.Operator{Kind: &pb.Operator_FlatMap{FlatMap: &pb.FlatMapOperator{}}}
	submit(t, c, 1, deploy(job, "sink", 0, 1, "sink-0", 0, checksumOp("sink.json"),
		gate("digits->sink", pipelined, channel("digits->sink", 0, 0, "digits-0", tm.DataAddr()))))
	submit(t, c, 1, deploy(job, "digits", 0, 1, "digits-0", 1, flatMap,
		gate("src->digits", pipelined, channel("src->digits", 0, 0, "src-0", tm.DataAddr())),
		produces("digits->sink", 0, 1, forward, pipelined)))
	submit(t, c, 1, source(job, "src", 0, 1, "src-0", 2, &pb.SequenceSource{Start: start, Count: count, Keys: keys},
		produces("src->digits", 0, 1, forward, pipelined)))
	for _, a := range []string{"src-0", "digits-0", "sink-0"} {
		jm.waitState(t, a, finished)
	}
	want := map[string]operator.KeyStat{}
	var n, sum int64
	for v := int64(start); v < start+count; v++ {
		k := fmt.Sprint(((v % keys) + keys) % keys)
		for _, d := range fmt.Sprint(v) { // the digits of v, with v's sign
			if d == '-' {
				continue
			}
			digit := int64(d - '0')
			if v < 0 {
				digit = -digit
			}
			ks := want[k]
			ks.Count++
			ks.Sum += digit
			want[k] = ks
			n++
			sum += digit
		}
	}
	cs, err := operator.ReadChecksum(filepath.Join(dir, "sink.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cs.Count != n || cs.Sum != sum || !cs.Finished {
		t.Fatalf("the sink got %d records summing to %d (finished %v), want %d summing to %d", cs.Count, cs.Sum, cs.Finished, n, sum)
	}
	for k, ks := range want {
		if cs.Keys[k] != ks {
			t.Errorf("key %s: %+v, want %+v", k, cs.Keys[k], ks)
		}
	}
}
