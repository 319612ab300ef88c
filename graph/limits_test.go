package graph

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// chain is n vertices of parallelism p joined by edges of distribution d; ids of idLen
// characters when idLen > 0.
func chain(n int, p int32, d pb.Distribution, idLen int) *pb.JobGraph {
	var vs []*pb.JobVertex
	var es []*pb.JobEdge
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("v%d", i)
		if idLen > 0 {
			id = fmt.Sprintf("%0*d", idLen, i)
		}
		switch {
		case i == 0:
			vs = append(vs, source(id, p, 0))
		case i == n-1:
			vs = append(vs, sink(id, p))
		default:
			vs = append(vs, mapper(id, p))
		}
		if i > 0 {
			es = append(es, &pb.JobEdge{Source: vs[i-1].Id, Target: id, Distribution: d, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED})
		}
	}
	return job(vs, es...)
}

// sizeShapes covers FORWARD and ALL_TO_ALL edges, fan-in, blocking results, long ids and every
// boundary where an index or a length needs one more varint byte.
func sizeShapes() map[string]*pb.JobGraph {
	shapes := map[string]*pb.JobGraph{
		"pipeline 2x3":        pipeline(2, 3),
		"pipeline 128x129":    pipeline(128, 129),
		"single vertex":       job([]*pb.JobVertex{source("src", 7, 0)}),
		"forward chain p=1":   chain(3, 1, pb.Distribution_DISTRIBUTION_FORWARD, 0),
		"forward chain p=127": chain(4, 127, pb.Distribution_DISTRIBUTION_FORWARD, 0),
		"forward chain p=300": chain(10, 300, pb.Distribution_DISTRIBUTION_FORWARD, 0),
		"a2a chain p=16":      chain(5, 16, pb.Distribution_DISTRIBUTION_ALL_TO_ALL, 0),
		"a2a chain p=200":     chain(3, 200, pb.Distribution_DISTRIBUTION_ALL_TO_ALL, 0),
		"a2a 64-char ids":     chain(3, 130, pb.Distribution_DISTRIBUTION_ALL_TO_ALL, 64),
		"forward 64-char ids": chain(3, 200, pb.Distribution_DISTRIBUTION_FORWARD, 64),
		"a2a 512x512":         pipeline(512, 512),
		"a2a 1x1024":          job([]*pb.JobVertex{source("s", 1, 0), sink("k", 1024)}, all("s", "k")),
		"a2a 1024x1":          job([]*pb.JobVertex{source("s", 1024, 0), sink("k", 1)}, all("s", "k")),
		"a2a 20000x3":         job([]*pb.JobVertex{source("s", 20000, 0), sink("k", 3)}, blocking(all("s", "k"))),
	}
	fanIn := job([]*pb.JobVertex{source("a", 40, 0), source("b", 3, 0), source("c", 40, 0), sink("k", 40)},
		fwd("a", "k"), blocking(all("b", "k")), fwd("c", "k"))
	fanIn.JobId = ""
	shapes["fan-in, no job id"] = fanIn
	return shapes
}

func countExpanded(eg *pb.ExecutionGraph) (execs, channels, partitions int64) {
	for _, ev := range AllExecutions(eg) {
		execs++
		channels += int64(InputCount(eg, ev))
	}
	for _, r := range eg.Results {
		partitions += int64(len(r.Partitions))
	}
	return
}

// TestSizeIsExactForBuiltGraphs: the counts and GraphBytes computed from the JobGraph alone
// equal what BuildExecutionGraph builds, byte for byte.
func TestSizeIsExactForBuiltGraphs(t *testing.T) {
	for name, jg := range sizeShapes() {
		s := Size(jg)
		b := proto.Clone(jg).(*pb.JobGraph)
		if b.JobId == "" {
			b.JobId = strings.Repeat("f", 32)
		}
		eg, err := BuildExecutionGraph(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		execs, channels, partitions := countExpanded(eg)
		if s.Executions != execs || s.InputChannels != channels || s.Partitions != partitions {
			t.Errorf("%s: size %+v, built %d executions, %d channels, %d partitions", name, s, execs, channels, partitions)
		}
		MaterializeInputs(eg) // the encoding of snapshots and views
		if got := int64(proto.Size(eg)); s.GraphBytes != got {
			t.Errorf("%s: GraphBytes %d, built graph encodes to %d", name, s.GraphBytes, got)
		}
	}
}

// deploy gives every subtask a current RUNNING attempt and refreshes the producers, the way the
// FSM's CREATE_ATTEMPTS and the reported states leave a running job. addr and tm name each
// subtask's TaskManager; start is the timestamp of every state change.
func deploy(eg *pb.ExecutionGraph, addr, tm func(s int32) string, start int64, slot func(s int32) int32) {
	n := 0
	for _, ev := range AllExecutions(eg) {
		n++
		ex := &pb.Execution{
			AttemptId: fmt.Sprintf("%032x", n), StartTimestamp: start, State: pb.ExecutionState_EXECUTION_STATE_RUNNING,
			Slot:          &pb.SlotID{TmId: tm(ev.SubtaskIndex), Index: slot(ev.SubtaskIndex)},
			TmGrpcAddress: addr(ev.SubtaskIndex), TmDataAddress: addr(ev.SubtaskIndex),
		}
		for i := 0; i < estStateChanges; i++ {
			ex.StateTimestamps = append(ex.StateTimestamps, &pb.StateTimestamp{State: pb.ExecutionState_EXECUTION_STATE_RUNNING, Timestamp: start})
		}
		ev.Current = ex
	}
	for _, r := range eg.Results {
		for _, p := range r.Partitions {
			p.Consumable = true
		}
	}
	RefreshProducers(eg)
	MaterializeInputs(eg) // the encoding of snapshots and views
}

// TestDeployedBytesEstimate: with values of the assumed lengths DeployedBytes is exact; with
// the values of a loopback test cluster and of a Kubernetes cluster (short and long addresses,
// real timestamps, few slots) it stays within 0.5x..2x of the real encoded graph.
func TestDeployedBytesEstimate(t *testing.T) {
	type deployment struct {
		addr, tm func(int32) string
		start    int64
		slot     func(int32) int32
		exact    bool
	}
	deployments := map[string]deployment{
		"assumed lengths": {
			addr:  func(s int32) string { return fmt.Sprintf("%020d", s) },
			tm:    func(s int32) string { return fmt.Sprintf("%08d", s) },
			start: estTimestamp, slot: func(int32) int32 { return estSlotIndex }, exact: true,
		},
		"loopback": {
			addr:  func(s int32) string { return fmt.Sprintf("127.0.0.1:%d", 7501+s%3) },
			tm:    func(s int32) string { return fmt.Sprintf("tm%d", 1+s%3) },
			start: 1_767_000_000_000, slot: func(s int32) int32 { return s % 4 },
		},
		"kubernetes": {
			addr:  func(s int32) string { return fmt.Sprintf("tm-%d.taskmanagers.jobs.svc.cluster.local:7501", s%50) },
			tm:    func(s int32) string { return fmt.Sprintf("taskmanager-%d", s%50) },
			start: 1_767_000_000_000, slot: func(s int32) int32 { return s % 16 },
		},
	}
	for name, jg := range sizeShapes() {
		s := Size(jg)
		for dname, d := range deployments {
			b := proto.Clone(jg).(*pb.JobGraph)
			if b.JobId == "" {
				b.JobId = strings.Repeat("f", 32)
			}
			eg, err := BuildExecutionGraph(b)
			if err != nil {
				t.Fatal(err)
			}
			deploy(eg, d.addr, d.tm, d.start, d.slot)
			real := int64(proto.Size(eg))
			ratio := float64(s.DeployedBytes) / float64(real)
			if d.exact && s.DeployedBytes != real {
				t.Errorf("%s, %s: DeployedBytes %d, deployed graph encodes to %d", name, dname, s.DeployedBytes, real)
			}
			if ratio < 0.5 || ratio > 2 {
				t.Errorf("%s, %s: DeployedBytes %d is %.2fx the real %d", name, dname, s.DeployedBytes, ratio, real)
			}
			t.Logf("%-20s %-15s estimate %10d real %10d ratio %.2f", name, dname, s.DeployedBytes, real, ratio)
		}
	}
}

func sizeErr(t *testing.T, err error) *SizeError {
	t.Helper()
	var se *SizeError
	if !errors.As(err, &se) || !errors.Is(err, ErrInvalidJobGraph) {
		t.Fatalf("want a *SizeError wrapping ErrInvalidJobGraph, got %v", err)
	}
	return se
}

// TestDefaultSizeLimits: the defaults admit a 512 -> 512 ALL_TO_ALL job and refuse the
// 141-byte 4-vertex ALL_TO_ALL chain at parallelism 1024, naming the limit, its value and the
// job's.
func TestDefaultSizeLimits(t *testing.T) {
	wide := job([]*pb.JobVertex{source("src", 512, 0), sink("sink", 512)}, all("src", "sink"))
	if s := Size(wide); s.Executions != 1024 || s.InputChannels != 262144 {
		t.Fatalf("512 -> 512: %+v", s)
	}
	if err := CheckSize(wide, DefaultSizeLimits()); err != nil {
		t.Fatalf("512 -> 512 refused by the defaults: %v", err)
	}
	hostile := chain(4, 1024, pb.Distribution_DISTRIBUTION_ALL_TO_ALL, 0)
	err := CheckSize(hostile, SizeLimits{}) // zero: the defaults
	se := sizeErr(t, err)
	if se.Size.InputChannels != 3<<20 || se.Ceiling {
		t.Fatalf("hostile chain: %+v", se)
	}
	for _, want := range []string{"max-job-input-channels = 524288", "3145728 input channels", "max-job-graph-bytes = 67108864"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	t.Logf("hostile chain: %v", err)
	if err := CheckCeiling(hostile); err == nil || !sizeErr(t, err).Ceiling || !strings.Contains(err.Error(), "replicated ceiling of max-job-input-channels = 1048576") {
		t.Errorf("ceiling: %v", err)
	}
}

// TestEachSizeLimitAtTheBoundary: for each limit a job at it is admitted and one just over it
// is refused with exactly that limit named.
func TestEachSizeLimitAtTheBoundary(t *testing.T) {
	wide := func(p, q int32) *pb.JobGraph {
		return job([]*pb.JobVertex{source("src", p, 0), sink("sink", q)}, all("src", "sink"))
	}
	fwdPair := func(p int32) *pb.JobGraph {
		return job([]*pb.JobVertex{source("src", p, 0), sink("sink", p)}, fwd("src", "sink"))
	}
	// The largest 1 -> q job under 50,000 deployed bytes, q found by search.
	q := int32(1)
	for Size(wide(1, q+1)).DeployedBytes <= 50_000 {
		q++
	}
	big := CeilingSizeLimits()
	cases := []struct {
		limit       string
		lim         SizeLimits
		under, over *pb.JobGraph
	}{
		{LimitExecutions, SizeLimits{100, big.MaxInputChannels, big.MaxGraphBytes}, fwdPair(50), fwdPair(51)},
		{LimitInputChannels, SizeLimits{big.MaxExecutions, 1000, big.MaxGraphBytes}, wide(20, 50), wide(21, 50)},
		{LimitGraphBytes, SizeLimits{big.MaxExecutions, big.MaxInputChannels, 50_000}, wide(1, q), wide(1, q+1)},
	}
	for _, c := range cases {
		if err := CheckSize(c.under, c.lim); err != nil {
			t.Errorf("%s: the job at the limit is refused: %v", c.limit, err)
		}
		se := sizeErr(t, CheckSize(c.over, c.lim))
		if len(se.Problems) != 1 || se.Problems[0].Limit != c.limit {
			t.Errorf("%s: the job over the limit is refused for %+v", c.limit, se.Problems)
		}
		if !strings.Contains(se.Error(), c.limit) {
			t.Errorf("%s: message %q does not name the limit", c.limit, se)
		}
	}
}

func TestSizeLimitsValidateAndClamp(t *testing.T) {
	c := CeilingSizeLimits()
	if err := (SizeLimits{}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("ceiling: %v", err)
	}
	d := DefaultSizeLimits()
	if d.MaxExecutions > c.MaxExecutions || d.MaxInputChannels > c.MaxInputChannels || d.MaxGraphBytes > c.MaxGraphBytes {
		t.Errorf("a default is above the ceiling: %+v %+v", d, c)
	}
	over := SizeLimits{MaxInputChannels: c.MaxInputChannels + 1}
	if err := over.Validate(); err == nil || !strings.Contains(err.Error(), LimitInputChannels) {
		t.Errorf("over the ceiling: %v", err)
	}
	if got := over.Clamp(); got.MaxInputChannels != c.MaxInputChannels || got.MaxExecutions != d.MaxExecutions {
		t.Errorf("clamp: %+v", got)
	}
}

// TestSizeOfAnyGraph: Size takes unvalidated graphs without panicking, in time independent of
// the parallelisms, and saturates instead of overflowing.
func TestSizeOfAnyGraph(t *testing.T) {
	if s := Size(nil); s != (ExpandedSize{}) {
		t.Errorf("nil: %+v", s)
	}
	odd := &pb.JobGraph{Vertices: []*pb.JobVertex{nil, {Id: ""}, {Id: "a", Parallelism: -5}, {Id: "a", Parallelism: 3}, {Id: "b", Parallelism: 2}},
		Edges: []*pb.JobEdge{nil, {Source: "a", Target: "zz"}, {Source: "b", Target: "a"}}}
	if s := Size(odd); s.Executions != 2 || s.InputChannels != 0 {
		t.Errorf("odd graph: %+v", s)
	}
	huge := chain(256, math.MaxInt32, pb.Distribution_DISTRIBUTION_ALL_TO_ALL, 64)
	s := Size(huge)
	if s.InputChannels <= 0 || s.DeployedBytes <= 0 || s.GraphBytes <= 0 {
		t.Errorf("huge graph overflowed: %+v", s)
	}
	if CheckCeiling(huge) == nil {
		t.Errorf("huge graph passes the ceiling")
	}
}
