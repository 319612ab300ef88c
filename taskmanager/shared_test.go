package taskmanager

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestSharedChannelListDeploysAWideGate: two consumers of an ALL_TO_ALL edge arrive in one
// SubmitTasks batch whose gates refer to one shared list of the four producers' channels (two
// producers on the consumers' own TM, two on another), each at its own subpartition; every
// record arrives once, routed to the right consumer.
func TestSharedChannelListDeploysAWideGate(t *testing.T) {
	jm := startJM(t)
	dir := t.TempDir()
	tm1 := newTM(t, "tm1", jm, func(c *Config) { c.WorkDir = dir })
	tm2 := newTM(t, "tm2", jm, func(c *Config) { c.WorkDir = dir })
	c1, c2 := client(t, tm1), client(t, tm2)
	const job, count, keys, producers = "job1", 1000, 8, 4
	list := &pb.SharedChannels{}
	for i := int32(0); i < producers; i++ {
		addr := tm1.DataAddr()
		if i >= 2 {
			addr = tm2.DataAddr()
		}
		list.Channels = append(list.Channels, channel("src->sink", i, 0, fmt.Sprintf("src-%d", i), addr))
	}
	var sinks []*pb.TaskDeploymentDescriptor
	for i := int32(0); i < 2; i++ {
		sinks = append(sinks, deploy(job, "sink", i, 2, fmt.Sprintf("sink-%d", i), i, checksumOp("sink-{subtask}.json"),
			[]*pb.InputGateDeploymentDescriptor{{ResultId: "src->sink", ResultType: pipelined, SharedChannels: 1, SubpartitionIndex: i}}))
	}
	resp, err := c1.SubmitTasks(t.Context(), &pb.SubmitTasksRequest{Epoch: 1, Tasks: sinks, SharedChannels: []*pb.SharedChannels{list}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Results {
		if r.Code != 0 {
			t.Fatalf("%s refused: %s", r.AttemptId, r.Message)
		}
	}
	for i := int32(0); i < producers; i++ {
		c, slot := c1, 2+i
		if i >= 2 {
			c, slot = c2, i-2
		}
		submit(t, c, 1, source(job, "src", i, producers, fmt.Sprintf("src-%d", i), slot, &pb.SequenceSource{Count: count, Keys: keys},
			produces("src->sink", i, 2, allToAll, pipelined)))
	}
	for _, a := range []string{"src-0", "src-1", "src-2", "src-3", "sink-0", "sink-1"} {
		jm.waitState(t, a, finished)
	}
	var total int64
	for i := 0; i < 2; i++ {
		cs, err := operator.ReadChecksum(filepath.Join(dir, fmt.Sprintf("sink-%d.json", i)))
		if err != nil {
			t.Fatal(err)
		}
		total += cs.Count
		for k := range cs.Keys {
			var key int64
			fmt.Sscan(k, &key)
			if dataplane.RouteKey(operator.Int64Bytes(key), 2) != i {
				t.Fatalf("sink %d got key %d, routed to %d", i, key, dataplane.RouteKey(operator.Int64Bytes(key), 2))
			}
		}
		for o, st := range cs.Origins {
			if st.Duplicates != 0 {
				t.Fatalf("sink %d origin %s: %d duplicates", i, o, st.Duplicates)
			}
		}
	}
	if total != producers*count {
		t.Fatalf("the sinks counted %d records, want %d", total, producers*count)
	}
	// What each task read and sent, as /metrics exports it: the sinks on tm1 read every record,
	// half of them over the Exchange stream from tm2, whose sources sent bytes; tm1's sources
	// send to its sinks locally (no bytes).
	var in, sinkBytes, tm2Out, tm1Out int64
	for _, io := range tm1.TaskIOs() {
		if io.VertexID == "sink" {
			in, sinkBytes = in+io.RecordsIn, sinkBytes+io.BytesIn
		} else {
			tm1Out += io.BytesOut
			if io.RecordsOut != count {
				t.Fatalf("%s[%d] emitted %d records, want %d", io.VertexID, io.Subtask, io.RecordsOut, count)
			}
		}
	}
	for _, io := range tm2.TaskIOs() {
		tm2Out += io.BytesOut
	}
	if in != producers*count || sinkBytes == 0 || tm2Out == 0 || tm1Out != 0 || sinkBytes != tm2Out {
		t.Fatalf("records in %d (want %d), bytes: sinks in %d, tm2's sources out %d, tm1's sources out %d (want equal, non-zero, zero)",
			in, producers*count, sinkBytes, tm2Out, tm1Out)
	}
}

// TestSharedChannelListsAreChecked: a reference out of range, a list with a bad channel, a
// gate with both inline and shared channels, a list of another result and a shared reference
// in a single SubmitTask are refused, each naming what is wrong, and nothing is deployed.
func TestSharedChannelListsAreChecked(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, nil)
	c := client(t, tm)
	good := &pb.SharedChannels{Channels: []*pb.InputChannelDescriptor{channel("r", 0, 0, "p0", "127.0.0.1:1"), channel("r", 1, 0, "p1", "127.0.0.1:1")}}
	subSet := &pb.SharedChannels{Channels: []*pb.InputChannelDescriptor{channel("r", 0, 3, "p0", "127.0.0.1:1")}}
	dup := &pb.SharedChannels{Channels: []*pb.InputChannelDescriptor{channel("r", 0, 0, "p0", "127.0.0.1:1"), channel("r", 0, 0, "p0", "127.0.0.1:1")}}
	sink := func(attempt string, slot int32, g *pb.InputGateDeploymentDescriptor) *pb.TaskDeploymentDescriptor {
		return deploy("job", "sink", slot, 4, attempt, slot, checksumOp("s-{subtask}.json"), []*pb.InputGateDeploymentDescriptor{g})
	}
	tasks := []*pb.TaskDeploymentDescriptor{
		sink("out-of-range", 0, &pb.InputGateDeploymentDescriptor{ResultId: "r", SharedChannels: 4}),
		sink("sub-set", 1, &pb.InputGateDeploymentDescriptor{ResultId: "r", SharedChannels: 2}),
		sink("both", 2, &pb.InputGateDeploymentDescriptor{ResultId: "r", SharedChannels: 1, Channels: good.Channels}),
		sink("other-result", 3, &pb.InputGateDeploymentDescriptor{ResultId: "q", SharedChannels: 1}),
		sink("duplicate", 3, &pb.InputGateDeploymentDescriptor{ResultId: "r", SharedChannels: 3}),
	}
	_, err := c.SubmitTasks(t.Context(), &pb.SubmitTasksRequest{Epoch: 1, Tasks: tasks, SharedChannels: []*pb.SharedChannels{good, subSet, dup}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a batch of bad references: %v; want InvalidArgument", err)
	}
	for _, want := range []string{
		"shared_channels 4, but the request has 3 shared channel lists",
		"shared_channels[1]: channels[0]: subpartition_index is set",
		"has both channels and shared_channels 1",
		`shared_channels[0] are of result "r", not the gate's "q"`,
		"shared_channels[2]: channels[1]: duplicate channel for partition 0",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refusal %q does not say %q", err, want)
		}
	}
	_, err = c.SubmitTask(t.Context(), &pb.SubmitTaskRequest{Epoch: 1, Task: sink("alone", 0, &pb.InputGateDeploymentDescriptor{ResultId: "r", SharedChannels: 1})})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "but the request has 0 shared channel lists") {
		t.Fatalf("a shared reference in SubmitTask: %v", err)
	}
	if n := len(tm.Tasks()); n != 0 {
		t.Fatalf("%d tasks deployed from refused requests", n)
	}
}

// TestSharedListsCannotExpandPastTheLimit: a small request whose gates all refer to one large
// shared list is refused whole, naming the limit, before anything is built.
func TestSharedListsCannotExpandPastTheLimit(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, nil)
	c := client(t, tm)
	list := &pb.SharedChannels{}
	for i := range 4096 {
		list.Channels = append(list.Channels, channel("r", int32(i), 0, "p", "127.0.0.1:1"))
	}
	var tasks []*pb.TaskDeploymentDescriptor
	for i := range maxSubmitChannels/4096 + 1 {
		tasks = append(tasks, deploy("job", "sink", int32(i), 1000, fmt.Sprint("s", i), 0, checksumOp("s.json"),
			[]*pb.InputGateDeploymentDescriptor{{ResultId: "r", SharedChannels: 1}}))
	}
	_, err := c.SubmitTasks(t.Context(), &pb.SubmitTasksRequest{Epoch: 1, Tasks: tasks, SharedChannels: []*pb.SharedChannels{list}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "over the limit of 1048576 per request (maxSubmitChannels)") {
		t.Fatalf("a request naming %d channels: %v", (maxSubmitChannels/4096+1)*4096, err)
	}
	if n := len(tm.Tasks()); n != 0 {
		t.Fatalf("%d tasks deployed", n)
	}
}
