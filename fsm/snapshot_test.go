package fsm

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// marshalDelim writes records the way Persist frames them (protodelim's framing), for streams
// built by hand.
var marshalDelim = protodelim.MarshalOptions{MarshalOptions: proto.MarshalOptions{Deterministic: true}}

// assertSameState compares two FSMs record by record.
func assertSameState(t *testing.T, want, got *FSM) {
	t.Helper()
	wj, gj := want.Jobs(), got.Jobs()
	if len(wj) != len(gj) {
		t.Fatalf("%d jobs, want %d", len(gj), len(wj))
	}
	for i := range wj {
		if !proto.Equal(wj[i], gj[i]) {
			t.Errorf("job %s differs after restore", wj[i].JobGraph.JobId)
		}
	}
	if !proto.Equal(want.Epoch(), got.Epoch()) {
		t.Errorf("epoch %v, want %v", got.Epoch(), want.Epoch())
	}
	wr, gr := want.Reconciliations(), got.Reconciliations()
	if len(wr) != len(gr) {
		t.Fatalf("%d reconciliations, want %d", len(gr), len(wr))
	}
	for i := range wr {
		if !proto.Equal(wr[i], gr[i]) {
			t.Errorf("reconciliation %d differs", i)
		}
	}
	wn, wa := want.RemovedJobs()
	if gn, ga := got.RemovedJobs(); gn != wn || ga != wa {
		t.Errorf("removed jobs %d (last at %d), want %d (last at %d)", gn, ga, wn, wa)
	}
	if !proto.Equal(want.Pool(), got.Pool()) {
		t.Errorf("pool %v, want %v", got.Pool(), want.Pool())
	}
	if want.Hash() != got.Hash() {
		t.Errorf("hash differs after restore")
	}
}

func TestSnapshotRoundTripEveryRecordType(t *testing.T) {
	h := newHarness(t)
	script(h) // jobs, an epoch and a completed reconciliation
	establish(h, 2)
	h.ok(beginT, &pb.BeginReconciliationCommand{Epoch: 2, Timestamp: 90}) // an in-progress one too
	h.ok(poolPutT, &pb.PoolPutCommand{TmId: "tm1", GrpcAddress: "127.0.0.1:1"})
	h.ok(poolPutT, &pb.PoolPutCommand{TmId: "tm2", GrpcAddress: "127.0.0.1:2"})
	data := persist(t, h.f)

	// Every record type appears in the stream.
	kinds := map[string]int{}
	r := bytes.NewReader(data)
	for r.Len() > 0 {
		rec := &pb.SnapshotRecord{}
		if err := protodelim.UnmarshalFrom(r, rec); err != nil {
			t.Fatal(err)
		}
		switch rec.Record.(type) {
		case *pb.SnapshotRecord_Header:
			kinds["header"]++
		case *pb.SnapshotRecord_Job:
			kinds["job"]++
		case *pb.SnapshotRecord_Epoch:
			kinds["epoch"]++
		case *pb.SnapshotRecord_Reconciliation:
			kinds["reconciliation"]++
		case *pb.SnapshotRecord_Pool:
			kinds["pool"]++
		}
	}
	if kinds["header"] != 1 || kinds["job"] != 2 || kinds["epoch"] != 1 || kinds["reconciliation"] != 2 || kinds["pool"] != 1 {
		t.Fatalf("records in stream: %v", kinds)
	}

	restored := New(testLogger(t))
	ch := restored.Changed()
	if err := restore(restored, data); err != nil {
		t.Fatal(err)
	}
	assertSameState(t, h.f, restored)
	select {
	case <-ch:
	default:
		t.Errorf("restore did not signal Changed")
	}
	a := jobIDN(10)
	if j, v, s, ok := restored.LocateAttempt(attemptID(a, "map", 2, 1)); !ok || j != a || v != "map" || s != 2 {
		t.Errorf("attempt index not rebuilt: %s %s %d %v", j, v, s, ok)
	}
	if restored.AppliedIndex() == 0 {
		t.Errorf("applied index not recovered")
	}
	// The restored FSM keeps applying identically.
	h2 := &harness{t: t, f: restored, index: h.index}
	for _, hh := range []*harness{h, h2} {
		hh.ok(endT, &pb.EndReconciliationCommand{Epoch: 2, Timestamp: 95})
		hh.setStatus(a, pb.JobStatus_JOB_STATUS_FAILING)
		hh.ok(poolAckT, &pb.PoolAckCommand{Acks: []*pb.PoolAck{{TmId: "tm1", Version: 2}}})
	}
	assertSameState(t, h.f, restored)
}

func TestSnapshotIsImmutable(t *testing.T) {
	h := newHarness(t)
	id := jobIDN(0)
	h.submit(streamingJob(id, 2, 2))
	want := h.f.Hash()
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	h.setStatus(id, pb.JobStatus_JOB_STATUS_RUNNING)
	h.attemptAll(id, 0)
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	f := New(testLogger(t))
	if err := restore(f, sink.Bytes()); err != nil {
		t.Fatal(err)
	}
	if f.Hash() != want {
		t.Errorf("the snapshot saw changes made after it was taken")
	}
}

func TestPersistCancelsSinkOnError(t *testing.T) {
	h := newHarness(t)
	h.submit(forwardJob(jobIDN(0), 3, 50))
	snap, _ := h.f.Snapshot()
	sink := &memSink{failAfter: 10}
	// The buffered writer flushes at the end: the failure surfaces from Persist.
	if err := snap.Persist(sink); err == nil {
		t.Fatal("Persist succeeded on a failing sink")
	}
	if !sink.cancelled || sink.closed {
		t.Errorf("sink cancelled=%v closed=%v", sink.cancelled, sink.closed)
	}
}

// bigState builds 10 jobs x 4 vertices x 250 subtasks = 10,000 executions, all attempted,
// every other job running.
func bigState(t testing.TB) *harness { return stateOf(t, 100, 10, 250) }

// stateOf builds a state of jobs jobs (ids from jobIDN(first) on) of 4 FORWARD-chained
// vertices x perVertex executions, every other job RUNNING, the rest DEPLOYING.
func stateOf(t testing.TB, first, jobs int, perVertex int32) *harness {
	h := newHarness(t)
	for j := range jobs {
		id := jobIDN(first + j)
		h.submit(forwardJob(id, 4, perVertex))
		h.setStatus(id, pb.JobStatus_JOB_STATUS_RUNNING)
		h.attemptAll(id, 0)
		h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_DEPLOYING)
		if j%2 == 0 {
			h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_RUNNING)
		}
	}
	establish(h, 1)
	return h
}

func TestSnapshot10kExecutions(t *testing.T) {
	h := bigState(t)
	n := 0
	for _, j := range h.f.Jobs() {
		n += len(graph.AllExecutions(j.ExecutionGraph))
	}
	if n != 10000 {
		t.Fatalf("%d executions", n)
	}
	data := persist(t, h.f)
	t.Logf("snapshot of %d executions: %d bytes", n, len(data))
	f := New(testLogger(t))
	if err := restore(f, data); err != nil {
		t.Fatal(err)
	}
	assertSameState(t, h.f, f)
	if _, _, _, ok := f.LocateAttempt(attemptID(jobIDN(109), "v3", 249, 0)); !ok {
		t.Errorf("attempt index not rebuilt")
	}
}

func TestRestoreRejectsBadStreams(t *testing.T) {
	src := newHarness(t)
	script(src)
	data := persist(t, src.f)

	// The target holds a different state that must survive every failed restore.
	target := newHarness(t)
	target.submit(streamingJob(jobIDN(42), 1, 1))
	establish(target, 1)
	want := target.f.Hash()

	// Record boundaries, to cut the stream exactly between records.
	var bounds []int
	r := bytes.NewReader(data)
	for r.Len() > 0 {
		if err := protodelim.UnmarshalFrom(r, &pb.SnapshotRecord{}); err != nil {
			t.Fatal(err)
		}
		bounds = append(bounds, len(data)-r.Len())
	}
	cases := map[string][]byte{}
	for _, cut := range []int{0, 1, 2, bounds[0], bounds[0] + 3, bounds[1], (bounds[1] + bounds[2]) / 2, bounds[len(bounds)-2], len(data) - 1} {
		cases["truncated at "+strconv.Itoa(cut)] = data[:cut]
	}
	flip := func(at int, b byte) []byte {
		c := bytes.Clone(data)
		c[at] = b
		return c
	}
	// Wire type 7 in the first tag of a record is never valid.
	cases["bad tag in header"] = flip(1, 0xff)
	cases["bad tag in a job"] = flip(bounds[0]+lenOfVarint(data[bounds[0]:]), 0xff)
	cases["bad tag in the epoch"] = flip(bounds[len(bounds)-2]+1, 0xff)
	cases["huge length"] = append([]byte{0xff, 0xff, 0xff, 0xff, 0x7f}, data...)
	cases["trailing data"] = append(bytes.Clone(data), 0x00)
	cases["garbage"] = []byte("not a snapshot at all")

	var wrongVersion bytes.Buffer
	marshalDelim.MarshalTo(&wrongVersion, &pb.SnapshotRecord{Record: &pb.SnapshotRecord_Header{Header: &pb.SnapshotHeader{Version: 2}}})
	marshalDelim.MarshalTo(&wrongVersion, &pb.SnapshotRecord{Record: &pb.SnapshotRecord_Epoch{Epoch: &pb.LeaderEpoch{}}})
	cases["wrong version"] = wrongVersion.Bytes()

	var noHeader bytes.Buffer
	marshalDelim.MarshalTo(&noHeader, &pb.SnapshotRecord{Record: &pb.SnapshotRecord_Epoch{Epoch: &pb.LeaderEpoch{}}})
	cases["no header"] = noHeader.Bytes()

	var dupJob bytes.Buffer
	job := src.f.Jobs()[0]
	marshalDelim.MarshalTo(&dupJob, &pb.SnapshotRecord{Record: &pb.SnapshotRecord_Header{Header: &pb.SnapshotHeader{Version: 1, Jobs: 2}}})
	marshalDelim.MarshalTo(&dupJob, &pb.SnapshotRecord{Record: &pb.SnapshotRecord_Job{Job: job}})
	marshalDelim.MarshalTo(&dupJob, &pb.SnapshotRecord{Record: &pb.SnapshotRecord_Job{Job: job}})
	marshalDelim.MarshalTo(&dupJob, &pb.SnapshotRecord{Record: &pb.SnapshotRecord_Epoch{Epoch: &pb.LeaderEpoch{}}})
	cases["duplicate job"] = dupJob.Bytes()
	cases["attempt current twice in one job"] = attemptTwiceInOneJob(t, src.f)

	for name, bad := range cases {
		err := restore(target.f, bad)
		if err == nil {
			t.Errorf("%s: restore succeeded", name)
			continue
		}
		if !errors.Is(err, ErrSnapshotCorrupt) && !errors.Is(err, ErrSnapshotVersion) {
			t.Errorf("%s: error %v wraps neither snapshot sentinel", name, err)
		}
		if target.f.Hash() != want {
			t.Fatalf("%s: a failed restore changed the state", name)
		}
	}
	if !errors.Is(restore(target.f, cases["wrong version"]), ErrSnapshotVersion) {
		t.Errorf("wrong version not reported as such")
	}
	// The intact stream still restores.
	if err := restore(target.f, data); err != nil {
		t.Fatal(err)
	}
	assertSameState(t, src.f, target.f)
}

// attemptTwiceInOneJob is a snapshot of f whose first job has the current attempt of one
// subtask copied onto another subtask of the same job.
func attemptTwiceInOneJob(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s := snap.(*snapshot)
	evs := graph.AllExecutions(s.jobs[0].ExecutionGraph)
	evs[1].Current = proto.Clone(evs[0].Current).(*pb.Execution)
	var buf bytes.Buffer
	if err := s.write(&buf, 0); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func lenOfVarint(b []byte) int {
	for i, c := range b {
		if c < 0x80 {
			return i + 1
		}
	}
	return len(b)
}

// snapshotFile is what `jmnode snapshot save` writes of f: the header and f's snapshot stream.
func snapshotFile(t *testing.T, f *FSM) []byte {
	t.Helper()
	snap, index, err := f.SnapshotAt()
	if err != nil {
		t.Fatal(err)
	}
	var sink bufferSink
	if err := WriteSnapshotFileHeader(&sink, index); err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// TestRestoreStreamRaisesTheEpoch: the stream a JobMaster restores from a snapshot file is the
// file's state with its epoch raised to the floor, never lowered; a damaged file is refused.
func TestRestoreStreamRaisesTheEpoch(t *testing.T) {
	h := stateOf(t, 1, 2, 3)
	file := snapshotFile(t, h.f)
	saved := h.f.Epoch().GetEpoch()
	for _, floor := range []uint64{0, saved, saved + 7} {
		stream, err := RestoreStream(file, floor)
		if err != nil {
			t.Fatal(err)
		}
		got := New(hclog.NewNullLogger())
		if err := got.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
			t.Fatal(err)
		}
		if want := max(saved, floor); got.Epoch().GetEpoch() != want || got.Epoch().GetLeaderId() != h.f.Epoch().GetLeaderId() {
			t.Fatalf("floor %d: epoch %v, want %d from leader %q", floor, got.Epoch(), want, h.f.Epoch().GetLeaderId())
		}
		if len(got.Jobs()) != len(h.f.Jobs()) {
			t.Fatalf("floor %d: %d jobs, want %d", floor, len(got.Jobs()), len(h.f.Jobs()))
		}
		if floor <= saved && got.Hash() != h.f.Hash() {
			t.Fatalf("floor %d: the state changed", floor)
		}
	}
	if _, err := RestoreStream(file[:len(file)-3], 1); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("truncated: %v", err)
	}
	if _, err := RestoreStream([]byte("hello"), 1); !errors.Is(err, ErrNotASnapshotFile) {
		t.Fatalf("not a snapshot: %v", err)
	}
}
