package agent_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"

	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/reconcile"
	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// counterValue sums the samples of a counter family whose labels include want.
func counterValue(t *testing.T, g interface {
	Gather() ([]*dto.MetricFamily, error)
}, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestRefusedTaskManagerIsLoudAndGetsNoWork: a TaskManager the leader refuses (an unsupported
// protocol version here, as slots out of range for a process) logs the refusal at ERROR within
// one heartbeat interval of its start, once however often it retries, counts it by call and
// code, keeps it as its current refusal; the leader records it (tm list, status, the REST view:
// "refused: ..."), counts it, and gives the TM no task, while a valid TM beside it runs a whole
// job.
func TestRefusedTaskManagerIsLoudAndGetsNoWork(t *testing.T) {
	const beat = time.Second // the refused TM's heartbeat interval (a process's default)
	c := testcluster.New(t, testcluster.Options{JMs: 3})
	c.Opts.TM = func(cfg *taskmanager.Config) {
		if cfg.ID == "tm-refused" {
			cfg.ProtocolVersion = jobmaster.MaxTMProtocol + 1
			cfg.HeartbeatInterval = beat
			cfg.FenceTimeout = 0 // the cluster's is below two of its heartbeats; it never gets a task to fence
		}
	}
	ok := c.AddTM("tm-ok")
	c.WaitTMs(1)
	started := time.Now()
	refused := c.AddTM("tm-refused")
	logPath := c.LogPath()
	errorLines := func() []string {
		b, _ := os.ReadFile(logPath)
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "[ERROR]") && strings.Contains(l, "tm-refused") && strings.Contains(l, "the leader refuses this TaskManager") {
				out = append(out, l)
			}
		}
		return out
	}
	testcluster.WaitFor(t, 10*time.Second, "tm-refused logs the refusal at ERROR", func() (bool, string) {
		n := len(errorLines())
		return n > 0, fmt.Sprintf("%d lines", n)
	})
	if took := time.Since(started); took > beat {
		t.Errorf("the refusal was logged %v after the TM started, more than one heartbeat interval (%v)", took, beat)
	}
	if r := refused.A.TM.CurrentRefusal(); r == nil || r.Call != taskmanager.CallRegister || r.Code != "FailedPrecondition" || !strings.Contains(r.Message, "protocol") {
		t.Fatalf("current refusal: %+v", r)
	}
	// The refusal repeats every heartbeat interval: counted each time, logged once.
	testcluster.WaitFor(t, 10*time.Second, "three refusals counted", func() (bool, string) {
		n := counterValue(t, refused.A.Metrics.Registry(), "jmcluster_tm_leader_refusals_total", map[string]string{"call": "register", "code": "FailedPrecondition"})
		return n >= 3, fmt.Sprintf("%v counted, refusals %+v", n, refused.A.TM.Refusals())
	})
	if n := len(errorLines()); n != 1 {
		t.Errorf("the same refusal was logged %d times at ERROR, want once: %q", n, errorLines())
	}

	l := c.Leader()
	if n := counterValue(t, l.A.Metrics.Registry(), "jmcluster_tm_registrations_refused_total", map[string]string{"kind": "protocol"}); n < 1 {
		t.Errorf("the leader counted %v refused registrations", n)
	}
	// tm list and status read ClusterStatus; the REST view /api/v1/cluster is the same.
	testcluster.WaitFor(t, 10*time.Second, "tm-refused shown refused by the leader's views", func() (bool, string) {
		st, err := c.Client(l).ClusterStatus(context.Background(), &pb.ClusterStatusRequest{})
		if err != nil {
			return false, err.Error()
		}
		for _, tm := range st.TaskManagers {
			if tm.Id == "tm-refused" {
				return strings.HasPrefix(tm.State, jmserver.RefusedState) && strings.Contains(tm.State, "protocol"), tm.State
			}
		}
		return false, "not listed"
	})

	// A job as large as tm-ok's slots runs there, every task; nothing goes to tm-refused.
	id := c.Submit(testcluster.StreamingChain("refused", int32(c.Opts.Slots), 200, 0))
	rec := c.WaitJob(id, "every task RUNNING", 30*time.Second, testcluster.AllRunning)
	for _, ev := range testcluster.Executions(rec) {
		if tmID := ev.GetCurrent().GetSlot().GetTmId(); tmID != "tm-ok" {
			t.Errorf("%s[%d] placed on %s", ev.VertexId, ev.SubtaskIndex, tmID)
		}
	}
	if n := len(refused.A.TM.TaskStates()); n != 0 {
		t.Errorf("tm-refused holds tasks: %v", refused.A.TM.TaskStates())
	}
	_ = ok
}

// ghostTM is a TaskManagerService that only counts the tasks it is given.
type ghostTM struct {
	pb.UnimplementedTaskManagerServiceServer
	submits atomic.Int64
}

func (g *ghostTM) SubmitTask(context.Context, *pb.SubmitTaskRequest) (*pb.SubmitTaskResponse, error) {
	g.submits.Add(1)
	return nil, fmt.Errorf("a ghost takes no task")
}

func (g *ghostTM) SubmitTasks(context.Context, *pb.SubmitTasksRequest) (*pb.SubmitTasksResponse, error) {
	g.submits.Add(1)
	return nil, fmt.Errorf("a ghost takes no task")
}

// TestGossipOnlyTaskManagerGetsNoWork: a TaskManager known only by gossip (it advertises 16
// slots and a live gRPC port, but never registers) is given no task and its slots are not
// counted, also by a leader elected after gossip told it of the TM (a new term used to give
// every TM with an address a fresh deadline, which made it usable); its heartbeat is answered
// unknown_task_manager so that it registers.
func TestGossipOnlyTaskManagerGetsNoWork(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 1})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ghost := &ghostTM{}
	srv := grpc.NewServer()
	pb.RegisterTaskManagerServiceServer(srv, ghost)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	var seeds []string
	for _, j := range c.Live() {
		seeds = append(seeds, j.A.Gossip.Addr())
	}
	g := membership.TestConfig(membership.Meta{Role: membership.RoleTaskManager, ID: "tm-ghost", GRPCAddr: lis.Addr().String(),
		DataAddr: "127.0.0.1:1", Slots: 16, Incarnation: "ghost"})
	g.Join = seeds
	m, err := membership.New(g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	knows := func(j *testcluster.JM) bool {
		tm, ok := j.A.JM.Registry().Get("tm-ghost")
		return ok && tm.GRPCAddr != ""
	}
	testcluster.WaitFor(t, 20*time.Second, "every JobMaster knows tm-ghost by gossip", func() (bool, string) {
		var missing []string
		for _, j := range c.Live() {
			if !knows(j) {
				missing = append(missing, j.ID)
			}
		}
		return len(missing) == 0, fmt.Sprintf("not yet: %v", missing)
	})
	// A new leader, elected while gossip knows tm-ghost.
	old := c.Leader()
	c.KillJM(old)
	l := c.Leader()
	if l == old {
		t.Fatal("no new leader")
	}
	c.WaitTMs(1)
	// The new leader's reconciliation asked tm-ghost too (it has an address) and got no report:
	// it holds nothing and never registered, which its record says (the UI shows "not yet
	// registered", not "dead").
	epoch := l.A.JM.Epoch()
	testcluster.WaitFor(t, 10*time.Second, "the reconciliation record names tm-ghost not yet registered", func() (bool, string) {
		for _, r := range l.A.State.Reconciliations() {
			if r.Epoch != epoch {
				continue
			}
			for _, rep := range r.Reports {
				if rep.TmId == "tm-ghost" {
					return rep.Detail == reconcile.NotRegisteredDetail, fmt.Sprintf("%s: %s", rep.Outcome, rep.Detail)
				}
			}
			return false, fmt.Sprintf("epoch %d %s, reports %v", r.Epoch, r.Outcome, r.Reports)
		}
		return false, "no record"
	})
	// Its heartbeat: unknown, register first.
	resp, err := pb.NewJobMasterServiceClient(c.Conn(l.GRPCAddr)).Heartbeat(context.Background(), &pb.HeartbeatRequest{TmId: "tm-ghost", Incarnation: "ghost"})
	if err != nil || !resp.GetUnknownTaskManager() {
		t.Fatalf("a heartbeat of a TM that never registered: %v, %v; want unknown_task_manager", resp, err)
	}
	for _, tm := range l.A.JM.Placeable() {
		if tm.ID == "tm-ghost" {
			t.Fatalf("tm-ghost is placeable: %+v", tm)
		}
	}
	// Its 16 slots are not counted: a job of tm1's 4 slots runs on tm1 alone (the leader places
	// a region on the TM with the most free slots: tm-ghost, were it counted).
	id := c.Submit(testcluster.StreamingChain("fits", int32(c.Opts.Slots), 200, 0))
	rec := c.WaitJob(id, "every task RUNNING", 30*time.Second, testcluster.AllRunning)
	for _, ev := range testcluster.Executions(rec) {
		if tmID := ev.GetCurrent().GetSlot().GetTmId(); tmID != "tm1" {
			t.Errorf("%s[%d] placed on %s", ev.VertexId, ev.SubtaskIndex, tmID)
		}
	}
	if n := ghost.submits.Load(); n != 0 {
		t.Fatalf("tm-ghost was sent %d submissions", n)
	}
}

// TestKilledFollowerShownUnreachableByRaft: a follower killed is unreachable by the leader's
// Raft (its heartbeats fail and it has not been heard from for two heartbeat timeouts) and shown
// so in the leader's ClusterStatus (or dead, if gossip got there first), and reachable again
// once it is back.
func TestKilledFollowerShownUnreachableByRaft(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3})
	l := c.Leader()
	f := c.Follower()
	stateOf := func(id string) string {
		st, err := c.Client(l).ClusterStatus(context.Background(), &pb.ClusterStatusRequest{})
		if err != nil {
			return err.Error()
		}
		for _, p := range st.Peers {
			if p.Id == id {
				return p.State
			}
		}
		return "not listed"
	}
	if s := stateOf(f.ID); s == jmserver.PeerUnreachable {
		t.Fatalf("a live follower shown %s", s)
	}
	c.KillJM(f)
	killed := time.Now()
	// Raft's verdict, whatever gossip says (the test profile's gossip is fast too).
	testcluster.WaitFor(t, 10*time.Second, f.ID+" unreachable by the leader's Raft", func() (bool, string) {
		u := l.A.Node.UnreachablePeers()
		_, ok := u[f.ID]
		return ok, fmt.Sprintf("unreachable %v", u)
	})
	took := time.Since(killed)
	t.Logf("%s unreachable by Raft %v after the kill", f.ID, took.Round(time.Millisecond))
	// An in-process kill cuts the replica off silently (no connection reset, as a hung
	// process): the leader's heartbeat to it fails on its deadline (about 2 s here), not at
	// once as after a kill -9, whose port refuses (the browser test: within 3 s, measured 1.6 s).
	if took > 5*time.Second {
		t.Errorf("unreachable %v after the kill", took)
	}
	if s := stateOf(f.ID); s != jmserver.PeerUnreachable && s != "dead" {
		t.Errorf("the leader's ClusterStatus shows %s as %q", f.ID, s)
	}
	c.StartJM(f)
	testcluster.WaitFor(t, 20*time.Second, f.ID+" reachable again", func() (bool, string) {
		s := stateOf(f.ID)
		return s != jmserver.PeerUnreachable && s != "dead" && s != "", s
	})
}
