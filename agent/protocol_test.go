package agent_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestLeaderRefusesATaskManagerOfAnotherProtocol: a TaskManager speaking a protocol newer than
// the JobMasters support is refused at registration, with an error naming both versions and
// what to upgrade, and never joins the registry; one of this build joins.
func TestLeaderRefusesATaskManagerOfAnotherProtocol(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3})
	c.Opts.TM = func(cfg *taskmanager.Config) {
		if cfg.ID == "tm-future" {
			cfg.ProtocolVersion = jobmaster.MaxTMProtocol + 1
		}
	}
	future := c.AddTM("tm-future")
	c.AddTM("tm-now")
	l := c.Leader()
	// Registered: the leader heard from it (LastSeen); a TM gossip alone knows has none.
	registered := func(id string) bool {
		tm, ok := l.A.JM.Registry().Get(id)
		return ok && !tm.LastSeen.IsZero()
	}
	testcluster.WaitFor(t, 10*time.Second, "tm-now registered", func() (bool, string) {
		return registered("tm-now"), ""
	})
	// tm-future tries every heartbeat interval (200 ms) and is refused each time.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if registered("tm-future") || future.A.TM.Epoch() != 0 {
			t.Fatal("the leader registered a TaskManager of an unsupported protocol")
		}
		time.Sleep(50 * time.Millisecond)
	}
	err := jobmaster.CheckTMProtocol(jobmaster.MaxTMProtocol+1, jobmaster.MinTMProtocol, jobmaster.MaxTMProtocol)
	if err == nil || !strings.Contains(err.Error(), "upgrade the JobMasters first") {
		t.Fatalf("a newer TaskManager: %v", err)
	}
}

// TestTMProtocolRange: 0 (a build before the field) is protocol 1; versions outside the range are
// refused naming the side to upgrade.
func TestTMProtocolRange(t *testing.T) {
	for _, c := range []struct {
		v, lo, hi uint32
		want      string
	}{
		{0, 1, 2, ""}, {1, 1, 2, ""}, {2, 1, 2, ""},
		{3, 1, 2, "speaks protocol 3, this JobMaster supports 1-2: upgrade the JobMasters first"},
		{1, 2, 2, "speaks protocol 1, this JobMaster supports 2-2: upgrade the TaskManager"},
		{0, 2, 3, "speaks protocol 1, this JobMaster supports 2-3: upgrade the TaskManager"},
	} {
		err := jobmaster.CheckTMProtocol(c.v, c.lo, c.hi)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckTMProtocol(%d, %d, %d) = %v; want %q", c.v, c.lo, c.hi, err, c.want)
		}
	}
	if taskmanager.ProtocolVersion < jobmaster.MinTMProtocol || taskmanager.ProtocolVersion > jobmaster.MaxTMProtocol {
		t.Fatalf("this build's TaskManager protocol %d is outside what its JobMasters support (%d-%d)",
			taskmanager.ProtocolVersion, jobmaster.MinTMProtocol, jobmaster.MaxTMProtocol)
	}
}

// TestWideJobOnTaskManagersOfTwoProtocols: a TaskManager of protocol 2 (before shared channel
// lists) and one of this build run one ALL_TO_ALL job wide enough for shared lists: the leader
// records each one's protocol (the older is sent every channel inline) and every task runs.
func TestWideJobOnTaskManagersOfTwoProtocols(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3})
	c.Opts.TM = func(cfg *taskmanager.Config) {
		cfg.Slots = 20
		if cfg.ID == "tm-old" {
			cfg.ProtocolVersion = jobmaster.SharedChannelsProtocol - 1
		}
	}
	c.AddTM("tm-old")
	c.AddTM("tm-new")
	l := c.Leader()
	testcluster.WaitFor(t, 10*time.Second, "both TMs registered with their protocols", func() (bool, string) {
		o, _ := l.A.JM.Registry().Get("tm-old")
		n, _ := l.A.JM.Registry().Get("tm-new")
		return o.Protocol == jobmaster.SharedChannelsProtocol-1 && n.Protocol == taskmanager.ProtocolVersion,
			fmt.Sprintf("tm-old %d, tm-new %d", o.Protocol, n.Protocol)
	})
	jg := testcluster.AllToAll("two-protocols", "src", "sink", 2*graph.MinSharedChannels, 2*graph.MinSharedChannels)
	id := c.Submit(jg)
	rec := c.WaitJob(id, "every task RUNNING", 60*time.Second, func(r *pb.JobRecord) bool {
		return testcluster.AllRunning(r)
	})
	on := map[string]int{}
	for _, ev := range graph.AllExecutions(rec.GetExecutionGraph()) {
		on[ev.GetCurrent().GetSlot().GetTmId()]++
	}
	if on["tm-old"] == 0 || on["tm-new"] == 0 {
		t.Fatalf("tasks per TM %v: the job must run on both", on)
	}
}

// TestBatchJobOnTaskManagersWithAndWithoutChannelGroups: a TaskManager serving Exchange as a
// build before channel groups did (no hello, an open_group ignored) and one of this build run
// a batch job whose ALL_TO_ALL BLOCKING edge has channels both ways between them: tm-new's
// consumers open their channels to the older producer one control each, tm-old's (its
// consumer side is this build's) open theirs to tm-new in groups, and the job finishes
// without a restart (a channel never answered would fail its task).
func TestBatchJobOnTaskManagersWithAndWithoutChannelGroups(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3})
	c.Opts.TM = func(cfg *taskmanager.Config) {
		cfg.Slots = 6
		cfg.ExchangeWithoutGroups = cfg.ID == "tm-old"
	}
	c.AddTM("tm-old")
	c.AddTM("tm-new")
	l := c.Leader()
	testcluster.WaitFor(t, 10*time.Second, "both TMs registered", func() (bool, string) {
		o, _ := l.A.JM.Registry().Get("tm-old")
		n, _ := l.A.JM.Registry().Get("tm-new")
		return !o.LastSeen.IsZero() && !n.LastSeen.IsZero(), ""
	})
	id := c.Submit(testcluster.BatchKeyedSum("groups-mixed", 8, 2000, 64))
	rec := c.WaitJob(id, "the job FINISHED", 60*time.Second, func(r *pb.JobRecord) bool {
		return r.GetStatus() == pb.JobStatus_JOB_STATUS_FINISHED || r.GetStatus() == pb.JobStatus_JOB_STATUS_FAILED
	})
	if rec.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job %s: %s", rec.GetStatus(), testcluster.Describe(rec))
	}
	on := map[string]map[string]int{}
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range v.Subtasks {
			if n := ev.GetCurrent().GetAttemptNumber(); n != 0 {
				t.Fatalf("%s/%d ran %d times: a channel between the two builds failed", v.GetVertexId(), ev.GetSubtaskIndex(), n+1)
			}
			tm := ev.GetCurrent().GetSlot().GetTmId()
			if on[v.GetVertexId()] == nil {
				on[v.GetVertexId()] = map[string]int{}
			}
			on[v.GetVertexId()][tm]++
		}
	}
	if on["filter"]["tm-old"] == 0 || on["filter"]["tm-new"] == 0 || on["sink"]["tm-old"] == 0 || on["sink"]["tm-new"] == 0 {
		t.Fatalf("tasks per vertex and TM %v: producers and consumers must run on both", on)
	}
}
