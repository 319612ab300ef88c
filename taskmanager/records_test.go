package taskmanager

import (
	"errors"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// growValue emits each record with its value grown to size bytes from the third record on.
type growValue struct{ size int }

func (g growValue) Process(ctx *operator.Context, r operator.Record) error {
	if r.Seq >= 2 {
		r.Value = make([]byte, g.size)
	}
	return ctx.Emit(r)
}

// TestRecordOverTheMaximumFailsTheTask: a task that emits a record over the TaskManager's
// MaxRecordSize fails with an error naming the limit and the record's size; a record at the
// limit goes through.
func TestRecordOverTheMaximumFailsTheTask(t *testing.T) {
	const limit = 4096
	size := limit + 1 - operator.Int64Size // with the 8-byte key: one byte over
	operator.ReplaceTransform(t, "map", false, func(*pb.Operator, operator.Info) operator.Transform { return growValue{size: size} })
	jm := startJM(t)
	dir := t.TempDir()
	tm := newTM(t, "tm1", jm, func(c *Config) { c.WorkDir, c.MaxRecordSize = dir, limit })
	c := client(t, tm)
	mapOp := &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{}}}
	run := func(job string) {
		submit(t, c, 1, deploy(job, "sink", 0, 1, job+"-sink", 0, &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}},
			gate(job+"-grow->sink", pipelined, channel(job+"-grow->sink", 0, 0, job+"-grow", tm.DataAddr()))))
		submit(t, c, 1, deploy(job, "grow", 0, 1, job+"-grow", 1, mapOp,
			gate(job+"-src->grow", pipelined, channel(job+"-src->grow", 0, 0, job+"-src", tm.DataAddr())),
			produces(job+"-grow->sink", 0, 1, forward, pipelined)))
		submit(t, c, 1, source(job, "src", 0, 1, job+"-src", 2, &pb.SequenceSource{Count: 10},
			produces(job+"-src->grow", 0, 1, forward, pipelined)))
	}
	run("over")
	cause := jm.waitState(t, "over-grow", failed)
	for _, want := range []string{ErrRecordTooLarge.Error(), "record 0/2 of 4097 bytes", "maximum record size 4096 bytes", "--max-record-size"} {
		if !strings.Contains(cause, want) {
			t.Fatalf("failure %q does not say %q", cause, want)
		}
	}
	size = limit - operator.Int64Size // with the 8-byte key: at the limit
	run("at")
	jm.waitState(t, "at-sink", finished)

	cfg := Config{ID: "x", MaxMessageSize: 1 << 20, MaxRecordSize: 1<<18 + 1}
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "MaxRecordSize") {
		t.Fatalf("a maximum record size above the message size: %v", err)
	}
}
