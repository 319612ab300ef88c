package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// registrations reads the "registered" events of a TaskManager's event log.
func registrations(t *testing.T, path string) []taskmanager.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []taskmanager.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev taskmanager.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event == "registered" {
			out = append(out, ev)
		}
	}
	return out
}

// TestRestartedLeaderAndTaskManagerHoldTasksAgain runs real processes: three JobMasters and
// three TaskManagers of four slots each, and a streaming job that needs every slot: twelve
// regions of a source, a map and a sink sharing one slot, so the killed TM's regions have
// nowhere to go but the restarted TM. Three times in a row, the leader and a TaskManager holding tasks are killed together;
// once the new leader's gate is open both restart with the same ids and addresses (the TM as a
// new incarnation). The restarted TM is given slots as soon as it registers — nothing the
// leader knew of the dead process (its gossip death, its loss) holds it back — so within six
// TM heartbeat intervals of its registration (its event log) it holds tasks again and every
// task of the job is RUNNING (the latest committed RUNNING timestamp of the current attempts).
// Six, not the two or three it takes on a quiet machine (0.2-0.5 s): a run with the machine
// loaded far beyond one busy core took 2.3 s; a TM held back by what the leader knew of the
// dead process would wait out the report deadline (six intervals) or the heartbeat timeout.
func TestRestartedLeaderAndTaskManagerHoldTasksAgain(t *testing.T) {
	// Not parallel: it bounds a latency (six heartbeat intervals) that other tests' load stretches.
	const heartbeat = 500 * time.Millisecond // fastProcs' --heartbeat-interval
	d := newProcessCluster(t, fastProcs)
	ctx := context.Background()
	if _, err := d.waitLeader(ctx, "", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := d.waitTMs(ctx, 30*time.Second, 3, 0); err != nil {
		t.Fatal(err)
	}
	jg := testcluster.StreamingChain("restarted-tm", 12, 50, 0)
	jg.JobId = newJobID()
	jg.RestartStrategy = &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 100, DelayMs: 100}
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lc := d.client(leader.LeaderGrpcAddress)
	if err := lc.call(15*time.Second, func(ctx context.Context) error {
		_, err := lc.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
		return err
	}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	lc.cc.Close()
	rec, err := d.waitJob(ctx, jg.JobId, 60*time.Second, allRunning)
	if err != nil {
		t.Fatal(err)
	}

	for round := 1; round <= 3; round++ {
		leader, err := d.waitLeader(ctx, "", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// The TM that holds the most tasks.
		count := map[string]int{}
		for _, a := range testcluster.Attempts(rec) {
			count[a.TM]++
		}
		victim := ""
		for tm, n := range count {
			if victim == "" || n > count[victim] || (n == count[victim] && tm < victim) {
				victim = tm
			}
		}
		jm, tm := d.Proc(leader.LeaderId), d.Proc(victim)
		before := len(registrations(t, tm.EventLog))
		if err := jm.Kill(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		if err := tm.Kill(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		next, err := d.waitLeader(ctx, jm.Name, 60*time.Second)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := jm.Start(); err != nil {
			t.Fatal(err)
		}
		if err := tm.Start(); err != nil {
			t.Fatal(err)
		}
		// Its registration first: until the new leader has reconciled, the committed record
		// still shows the attempts the killed process ran, all RUNNING.
		var regs []taskmanager.Event
		deadline := time.Now().Add(60 * time.Second)
		for regs = registrations(t, tm.EventLog); len(regs) <= before; regs = registrations(t, tm.EventLog) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %s logged no registration within 60s of its restart (%d before)", round, victim, before)
			}
			time.Sleep(20 * time.Millisecond)
		}
		reg := regs[before]
		if reg.Incarnation == "" || (before > 0 && reg.Incarnation == regs[before-1].Incarnation) {
			t.Fatalf("round %d: the restarted %s registered with incarnation %q (before: %v)", round, victim, reg.Incarnation, regs[:before])
		}
		// Then attempts deployed to it after it registered, and every task RUNNING.
		rec, err = d.waitJob(ctx, jg.JobId, 60*time.Second, func(r *pb.JobRecord) bool {
			on := 0
			for _, ev := range testcluster.Executions(r) {
				if ev.GetCurrent().GetSlot().GetTmId() != victim {
					continue
				}
				for _, st := range ev.GetCurrent().GetStateTimestamps() {
					if st.State == pb.ExecutionState_EXECUTION_STATE_RUNNING && !time.UnixMilli(st.Timestamp).Before(reg.TS.Truncate(time.Millisecond)) {
						on++
					}
				}
			}
			return allRunning(r) && on > 0
		})
		if err != nil {
			t.Fatalf("round %d: %s restarted: %v", round, victim, err)
		}
		var lastRunning int64
		for _, ev := range testcluster.Executions(rec) {
			for _, st := range ev.GetCurrent().GetStateTimestamps() {
				if st.State == pb.ExecutionState_EXECUTION_STATE_RUNNING {
					lastRunning = max(lastRunning, st.Timestamp)
				}
			}
		}
		took := time.UnixMilli(lastRunning).Sub(reg.TS)
		t.Logf("round %d: killed %s (leader) and %s; %s leads at epoch %d; %s registered (incarnation %s) and every task RUNNING %v later",
			round, jm.Name, victim, next.LeaderId, next.Epoch, victim, reg.Incarnation, took.Round(time.Millisecond))
		if took > 6*heartbeat {
			t.Logf("log of %s:\n%s", victim, tm.LogTail(80))
			t.Fatalf("round %d: every task RUNNING %v after %s registered, want within 6 heartbeat intervals (%v)", round, took, victim, 6*heartbeat)
		}
		if err := d.waitTMs(ctx, 30*time.Second, 3, 0); err != nil {
			t.Fatal(err)
		}
	}
}
