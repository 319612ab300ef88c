package taskmanager

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// syncBuffer is a goroutine-safe event log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) events(t *testing.T) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Event
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("event log line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// TestPipelineAcrossTwoTMs: source(p=2) on TM1 -> ALL_TO_ALL PIPELINED -> map(p=2) on TM2 ->
// FORWARD -> checksum sink(p=2) on TM2 and TM1.
func TestPipelineAcrossTwoTMs(t *testing.T) {
	jm := startJM(t)
	var log1, log2 syncBuffer
	dir := t.TempDir() // both TMs' work dir
	tm1 := newTM(t, "tm1", jm, func(c *Config) { c.EventLog, c.WorkDir = &log1, dir })
	tm2 := newTM(t, "tm2", jm, func(c *Config) { c.EventLog, c.WorkDir = &log2, dir })
	c1, c2 := client(t, tm1), client(t, tm2)
	const job, count, keys = "job1", 1000, 4
	sinkPath := "sink-{subtask}.json"
	srcCfg := &pb.SequenceSource{Count: count, Keys: keys}
	mapOp := &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 2, Add: 1}}}

	// Consumers first: they wait (NotFound, retried) until their producers appear.
	for i := int32(0); i < 2; i++ {
		c, slot := c2, int32(1)
		if i == 1 {
			c, slot = c1, 2
		}
		submit(t, c, 1, deploy(job, "sink", i, 2, fmt.Sprintf("sink-%d", i), slot, checksumOp(sinkPath),
			gate("map->sink", pipelined, channel("map->sink", i, 0, fmt.Sprintf("map-%d", i), tm2.DataAddr()))))
	}
	for i := int32(0); i < 2; i++ {
		submit(t, c2, 1, deploy(job, "map", i, 2, fmt.Sprintf("map-%d", i), i+2, mapOp,
			gate("src->map", pipelined,
				channel("src->map", 0, i, "src-0", tm1.DataAddr()),
				channel("src->map", 1, i, "src-1", tm1.DataAddr())),
			produces("map->sink", i, 1, forward, pipelined)))
	}
	for i := int32(0); i < 2; i++ {
		submit(t, c1, 1, source(job, "src", i, 2, fmt.Sprintf("src-%d", i), i, srcCfg,
			produces("src->map", i, 2, allToAll, pipelined)))
	}

	for _, a := range []string{"src-0", "src-1", "map-0", "map-1", "sink-0", "sink-1"} {
		jm.waitState(t, a, finished)
		if got := jm.accepted(a); len(got) != 2 || got[0] != running || got[1] != finished {
			t.Fatalf("%s: states %v, want [RUNNING FINISHED]", a, got)
		}
	}

	// Expected per key: both source subtasks emit v in [0,count), key v%keys, mapped 2v+1.
	want := map[int64]operator.KeyStat{}
	for s := 0; s < 2; s++ {
		for v := int64(0); v < count; v++ {
			k := want[v%keys]
			k.Count++
			k.Sum += 2*v + 1
			want[v%keys] = k
		}
	}
	var total int64
	for i := 0; i < 2; i++ {
		cs, err := operator.ReadChecksum(filepath.Join(dir, fmt.Sprintf("sink-%d.json", i)))
		if err != nil {
			t.Fatal(err)
		}
		if !cs.Finished || cs.AttemptID != fmt.Sprintf("sink-%d", i) {
			t.Fatalf("sink %d: finished=%v attempt=%s", i, cs.Finished, cs.AttemptID)
		}
		total += cs.Count
		for k := int64(0); k < keys; k++ {
			got, ok := cs.Keys[strconv.FormatInt(k, 10)]
			if dataplane.RouteKey(operator.Int64Bytes(k), 2) != i {
				if ok {
					t.Fatalf("sink %d got key %d routed to %d", i, k, dataplane.RouteKey(operator.Int64Bytes(k), 2))
				}
				continue
			}
			if got != want[k] {
				t.Fatalf("sink %d key %d: got %+v want %+v", i, k, got, want[k])
			}
		}
		for o, st := range cs.Origins {
			if st.Duplicates != 0 {
				t.Fatalf("sink %d origin %s: %d duplicates", i, o, st.Duplicates)
			}
		}
	}
	if total != 2*count {
		t.Fatalf("total count %d, want %d", total, 2*count)
	}
	waitFor(t, 5*time.Second, "slots freed", func() (bool, string) {
		return tm1.FreeSlots() == 4 && tm2.FreeSlots() == 4, fmt.Sprintf("tm1=%d tm2=%d", tm1.FreeSlots(), tm2.FreeSlots())
	})

	// Each task logged a start and then a stop event; the outbox's deliveries of an attempt
	// carry rising sequence numbers.
	evs := append(log1.events(t), log2.events(t)...)
	seen := map[string][]string{}
	lastSeq := map[string]uint64{}
	for _, e := range evs {
		if e.Event == "delivered" {
			if e.Seq <= lastSeq[e.AttemptID] {
				t.Fatalf("%s: message %d (%s) delivered after message %d", e.AttemptID, e.Seq, e.State, lastSeq[e.AttemptID])
			}
			lastSeq[e.AttemptID] = e.Seq
			continue
		}
		seen[e.AttemptID] = append(seen[e.AttemptID], e.Event+":"+e.State)
	}
	for _, a := range []string{"src-0", "src-1", "map-0", "map-1", "sink-0", "sink-1"} {
		if got := fmt.Sprint(seen[a]); got != "[start:RUNNING stop:FINISHED]" {
			t.Fatalf("events of %s: %s", a, got)
		}
	}
	// The pipelined producers asked for their consumers to be scheduled.
	jm.mu.Lock()
	n := len(jm.consumers)
	jm.mu.Unlock()
	if n != 4 {
		t.Fatalf("ScheduleOrUpdateConsumers calls: %d, want 4", n)
	}
}

// TestBlockingExchange: the consumer is deployed after the producer FINISHED and reads
// everything; the partition can be read again by another consumer.
func TestBlockingExchange(t *testing.T) {
	jm := startJM(t)
	tm1 := newTM(t, "tm1", jm, nil)
	dir := t.TempDir()
	tm2 := newTM(t, "tm2", jm, func(c *Config) { c.WorkDir = dir })
	c1, c2 := client(t, tm1), client(t, tm2)
	submit(t, c1, 1, source("job", "src", 0, 1, "src", 0, &pb.SequenceSource{Start: 10, Count: 700, Keys: 3},
		produces("src->sink", 0, 1, forward, blocking)))
	jm.waitState(t, "src", finished)

	rep := report(t, c1, &pb.RequestReportRequest{Epoch: 1})
	if p := rep[0].GetExecutions()[0].GetProduced(); len(p) != 1 || !p[0].GetConsumable() {
		t.Fatalf("blocking partition not consumable after FINISHED: %v", p)
	}
	for i, a := range []string{"sink-a", "sink-b"} {
		path := filepath.Join(dir, a+".json")
		d := deploy("job", "sink", 0, 1, a, int32(i), checksumOp(a+".json"),
			gate("src->sink", blocking, channel("src->sink", 0, 0, "src", tm1.DataAddr())))
		d.AttemptNumber = int32(i) // a second consumer of the same subtask is its next attempt
		submit(t, c2, 1, d)
		jm.waitState(t, a, finished)
		cs, err := operator.ReadChecksum(path)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for v := int64(10); v < 710; v++ {
			sum += v
		}
		o := cs.Origins["0"]
		if cs.Count != 700 || cs.Sum != sum || o.Gaps != 0 || o.Duplicates != 0 || o.LastSeq != 699 || !cs.Finished {
			t.Fatalf("%s: %+v", a, cs)
		}
	}
}

// TestUpdatePartitionInfo: a consumer deployed without its producer connects once told.
func TestUpdatePartitionInfo(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, nil)
	c := client(t, tm)
	submit(t, c, 1, deploy("job", "sink", 0, 1, "sink", 0, checksumOp("sink.json"),
		gate("r", pipelined, channel("r", 0, 0, "", ""))))
	submit(t, c, 1, source("job", "src", 0, 1, "src", 1, &pb.SequenceSource{Count: 100}, produces("r", 0, 1, forward, pipelined)))
	jm.waitState(t, "sink", running)
	if _, err := c.UpdatePartitionInfo(t.Context(), &pb.UpdatePartitionInfoRequest{
		Epoch: 1, JobId: "job", ConsumerAttemptId: "sink",
		Channels: []*pb.InputChannelDescriptor{channel("r", 0, 0, "src", tm.DataAddr())},
	}); err != nil {
		t.Fatal(err)
	}
	jm.waitState(t, "sink", finished)
	jm.waitState(t, "src", finished)
	rep := report(t, c, &pb.RequestReportRequest{Epoch: 1})
	for _, e := range rep[0].GetExecutions() {
		if e.GetAttemptId() == "sink" && e.GetConsumed()[0].GetProducerAttemptId() != "src" {
			t.Fatalf("consumed report not updated: %v", e.GetConsumed())
		}
	}
}

// TestProducerCrashFailsConsumer: a broken stream fails the consumer, naming the producer.
func TestProducerCrashFailsConsumer(t *testing.T) {
	jm := startJM(t)
	tm1 := newTM(t, "tm1", jm, nil)
	tm2 := newTM(t, "tm2", jm, nil)
	c1, c2 := client(t, tm1), client(t, tm2)
	path := filepath.Join(tm2.cfg.WorkDir, "sink.json")
	submit(t, c1, 1, source("job", "src", 0, 1, "src-attempt", 0, &pb.SequenceSource{RatePerSecond: 2000},
		produces("r", 0, 1, forward, pipelined)))
	submit(t, c2, 1, deploy("job", "sink", 0, 1, "sink", 0, checksumOp("sink.json"),
		gate("r", pipelined, channel("r", 0, 0, "src-attempt", tm1.DataAddr()))))
	waitFor(t, 10*time.Second, "records at the sink", func() (bool, string) {
		cs, err := operator.ReadChecksum(path)
		return err == nil && cs.Count > 0, fmt.Sprint(cs.Count, err)
	})
	tm1.Kill()
	cause := jm.waitState(t, "sink", failed)
	if !bytes.Contains([]byte(cause), []byte("src-attempt")) {
		t.Fatalf("cause does not name the producer: %q", cause)
	}
}
