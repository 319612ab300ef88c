package agent_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	"google.golang.org/grpc"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/testkit/benchgoal"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The whole path's load: clients concurrent TaskManager workers, each walking its attempts
// through the five states of cycle with one UpdateTaskExecutionState call per transition (as
// the TaskManager's outbox does: one worker per attempt with pending messages); for the raw
// baseline the same number of goroutines each applies one entry per transition.
const (
	throughputClients = 256
	throughputPhase   = 5 * time.Second
)

// TestGoalWholePathThroughput (JMC_GOALS=1, `make bench-short`): committed execution-state
// transitions per second through the whole path (simulated TaskManagers -> gRPC
// UpdateTaskExecutionState -> the leader's lookup and batcher -> Raft on three JobMasters over
// loopback, bolt with fsync -> the FSM), against raw hashicorp/raft in the same run: three
// nodes with the same stores, transport settings and timings, each transition its own entry of
// the size the whole path's single update encodes to, applied by as many goroutines. Goal: the
// whole path carries at least 0.8 x raw Raft's transitions per second.
func TestGoalWholePathThroughput(t *testing.T) {
	benchgoal.Skip(t)
	whole, entries, perEntry := wholePathThroughput(t)
	raw, entryBytes := rawRaftThroughput(t, 1, throughputClients)
	// And the Raft commits alone of entries as large as the whole path's, one at a time as its
	// batcher commits them: how much of the whole path's time is Raft's.
	batched, batchBytes := rawRaftThroughput(t, int(perEntry+0.5), 1)
	ratio := whole / raw
	t.Logf("whole path: %.0f transitions/s (%d Raft entries, %.1f updates per entry); raw hashicorp/raft: %.0f entries/s of %d bytes from %d goroutines; "+
		"entries of %d bytes one at a time: %.0f entries/s = %.0f transitions/s; %s each",
		whole, entries, perEntry, raw, entryBytes, throughputClients, batchBytes, batched, batched*float64(int(perEntry+0.5)), throughputPhase)
	benchgoal.Report(t, "whole-path-transitions-vs-raw-raft", ratio, 0.8, ratio >= 0.8, "x")
}

// wholePathThroughput runs the whole path for throughputPhase and returns the transitions
// committed per second, the Raft entries they took and the updates per entry.
func wholePathThroughput(t *testing.T) (perSec float64, entries uint64, perEntry float64) {
	t.Helper()
	c := testcluster.New(t, testcluster.Options{JMs: 3, LogLevel: hclog.Warn, Raft: func(cc *cluster.Config) {
		d := cluster.DefaultConfig()
		cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout
	}})
	l := c.Leader()
	ctx := context.Background()
	const tasks = throughputClients * 4 // 1024: the parallelism limit
	jobID := jobmaster.NewJobID()
	jg := &pb.JobGraph{JobId: jobID, Name: "throughput", Type: pb.JobType_JOB_TYPE_STREAMING, Vertices: []*pb.JobVertex{
		{Id: "v", Parallelism: tasks, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{}}}},
		{Id: "k", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}},
	}, Edges: []*pb.JobEdge{{Source: "v", Target: "k", Distribution: pb.Distribution_DISTRIBUTION_ALL_TO_ALL, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}}}
	if _, err := l.A.JM.Commit(ctx, pb.CommandType_COMMAND_TYPE_SUBMIT_JOB, &pb.SubmitJobCommand{JobGraph: jg, Timestamp: 1}); err != nil {
		t.Fatal(err)
	}
	// RECONCILING, which the scheduler leaves alone: the attempts have no TaskManager behind
	// them and must not be deployed, failed over or restarted (as BenchmarkCommitStateUpdate).
	if _, err := l.A.JM.Commit(ctx, pb.CommandType_COMMAND_TYPE_SET_JOB_STATUS, &pb.SetJobStatusCommand{JobId: jobID, Status: pb.JobStatus_JOB_STATUS_RECONCILING, Timestamp: 2}); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(l.GRPCAddr, append([]grpc.DialOption{transport.DialCredentials(nil, "")}, transport.DialOptions(0, "throughput")...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := pb.NewJobMasterServiceClient(cc)

	var (
		round int32
		ids   []string
		mu    sync.Mutex
	)
	// newAttempts commits the next attempt of every subtask (outside the measured phase's
	// count: the workers wait for it as a TaskManager waits for a deployment).
	newAttempts := func() []string {
		round++
		cmd := &pb.CreateAttemptsCommand{JobId: jobID, Timestamp: time.Now().UnixMilli()}
		out := make([]string, tasks)
		for i := range tasks {
			out[i] = fmt.Sprintf("%08x%08x%016x", round, i, 0)
			cmd.Attempts = append(cmd.Attempts, &pb.AttemptSpec{VertexId: "v", SubtaskIndex: int32(i), AttemptId: out[i], AttemptNumber: round,
				Slot: &pb.SlotID{TmId: fmt.Sprintf("sim%03d", i%throughputClients), Index: int32(i / throughputClients)}})
		}
		if _, err := l.A.JM.Commit(ctx, pb.CommandType_COMMAND_TYPE_CREATE_ATTEMPTS, cmd); err != nil {
			t.Error(err)
		}
		return out
	}
	ids = newAttempts()
	var done atomic.Int64
	var failed atomic.Value
	stop := make(chan struct{})
	cond := sync.NewCond(&mu)
	finished, gen, stopped := 0, 0, false
	var wg sync.WaitGroup
	indexBefore := l.A.Node.CommitIndex()
	start := time.Now()
	for w := range throughputClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tm := fmt.Sprintf("sim%03d", w)
			mu.Lock()
			mine := ids
			mu.Unlock()
			for {
				for i := w; i < tasks; i += throughputClients {
					for _, st := range cycleStates {
						select {
						case <-stop:
							return
						default:
						}
						_, err := client.UpdateTaskExecutionState(ctx, &pb.UpdateTaskExecutionStateRequest{TmId: tm, JobId: jobID, AttemptId: mine[i], State: st})
						if err != nil {
							failed.Store(err)
							return
						}
						done.Add(1)
					}
				}
				// The last worker to end its attempts of this round commits the next round's;
				// the others wait for it, as TaskManagers wait for a deployment.
				mu.Lock()
				if finished++; finished == throughputClients {
					ids, finished = newAttempts(), 0
					gen++
					cond.Broadcast()
				} else {
					for g := gen; gen == g && !stopped; {
						cond.Wait()
					}
				}
				mine = ids
				quit := stopped
				mu.Unlock()
				if quit {
					return
				}
			}
		}()
	}
	time.AfterFunc(throughputPhase, func() {
		close(stop)
		mu.Lock()
		stopped = true
		cond.Broadcast()
		mu.Unlock()
	})
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("UpdateTaskExecutionState: %v", err)
	}
	n := done.Load()
	entries = l.A.Node.CommitIndex() - indexBefore
	return float64(n) / elapsed.Seconds(), entries, float64(n) / float64(max(entries, 1))
}

// cycleStates: the transitions of one attempt, each legal after the one before.
var cycleStates = []pb.ExecutionState{
	pb.ExecutionState_EXECUTION_STATE_DEPLOYING, pb.ExecutionState_EXECUTION_STATE_INITIALIZING,
	pb.ExecutionState_EXECUTION_STATE_RUNNING, pb.ExecutionState_EXECUTION_STATE_CANCELING,
	pb.ExecutionState_EXECUTION_STATE_CANCELED,
}

// countingFSM is raw Raft's state machine: it counts entries.
type countingFSM struct{ n atomic.Int64 }

func (f *countingFSM) Apply(*raft.Log) any                 { f.n.Add(1); return nil }
func (f *countingFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, fmt.Errorf("no snapshots") }
func (f *countingFSM) Restore(io.ReadCloser) error         { return nil }

// rawRaftThroughput runs three hashicorp/raft nodes over loopback TCP, on raft-boltdb with
// fsync, with the JobMasters' default timings and transport settings, and applies entries of
// an UPDATE_EXECUTION_STATES command of updates updates (as the whole path encodes them) from
// writers goroutines for throughputPhase. It returns the entries committed per second and the
// entry's size.
func rawRaftThroughput(t *testing.T, updates, writers int) (perSec float64, size int) {
	t.Helper()
	cmd := &pb.UpdateExecutionStatesCommand{}
	for i := range max(updates, 1) {
		cmd.Updates = append(cmd.Updates, &pb.ExecutionStateUpdate{JobId: jobmaster.NewJobID(), AttemptId: fmt.Sprintf("%08x%08x%016x", 1, i, 0),
			State: pb.ExecutionState_EXECUTION_STATE_RUNNING, Timestamp: time.Now().UnixMilli()})
	}
	entry, err := fsm.Encode(pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES, cmd)
	if err != nil {
		t.Fatal(err)
	}
	d := cluster.DefaultConfig()
	type node struct {
		r     *raft.Raft
		trans *raft.NetworkTransport
		store *raftboltdb.BoltStore
	}
	var nodes []node
	var servers []raft.Server
	for i := range 3 {
		dir := t.TempDir()
		store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db"), BoltOptions: &bbolt.Options{Timeout: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		// The JobMasters' transport: a pool of 3, 10 s timeout, one RPC in flight (cluster/node.go).
		trans, err := raft.NewTCPTransportWithConfig("127.0.0.1:0", nil, &raft.NetworkTransportConfig{MaxPool: 3, Timeout: 10 * time.Second,
			MaxRPCsInFlight: 1, Logger: hclog.NewNullLogger()})
		if err != nil {
			t.Fatal(err)
		}
		rc := raft.DefaultConfig()
		rc.LocalID = raft.ServerID(fmt.Sprintf("raw%d", i))
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout
		rc.CommitTimeout = d.CommitTimeout
		rc.Logger = hclog.NewNullLogger()
		r, err := raft.NewRaft(rc, &countingFSM{}, store, store, raft.NewInmemSnapshotStore(), trans)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, node{r, trans, store})
		servers = append(servers, raft.Server{ID: rc.LocalID, Address: trans.LocalAddr()})
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = n.r.Shutdown().Error()
			_ = n.trans.Close()
			_ = n.store.Close()
		}
	})
	if err := nodes[0].r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}
	var leader *raft.Raft
	testcluster.WaitFor(t, 30*time.Second, "a raw Raft leader", func() (bool, string) {
		for _, n := range nodes {
			if n.r.State() == raft.Leader {
				leader = n.r
				return true, ""
			}
		}
		return false, "no leader"
	})
	var done atomic.Int64
	var failed atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := leader.Apply(entry, 10*time.Second).Error(); err != nil {
					failed.Store(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	time.AfterFunc(throughputPhase, func() { close(stop) })
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("raw raft Apply: %v", err)
	}
	return float64(done.Load()) / elapsed.Seconds(), len(entry)
}
