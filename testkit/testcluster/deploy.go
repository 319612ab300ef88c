package testcluster

import (
	"context"
	"fmt"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// DeployOnSims commits, through leader j, a RUNNING attempt for every subtask of the job that
// has none, placed round-robin on the simulated TMs, and gives each TM the matching execution
// reports (with the partitions each subtask produces and consumes, read from the committed
// ExecutionGraph). It commits as the scheduler would — CREATE_ATTEMPTS, then DEPLOYING, then
// RUNNING — in entries of at most perEntry attempts (0: 5,000), subtask index by subtask
// index (so a FORWARD chain's regions are whole in each entry), and returns how many
// attempts it committed. The job must be waiting for slots (no TaskManager registered), and
// the sims started without JobMasters.
func (c *Cluster) DeployOnSims(j *JM, jobID string, sims []*SimTM, perEntry int) int {
	c.T.Helper()
	if perEntry <= 0 {
		perEntry = 5000
	}
	var (
		pending  []*pb.AttemptSpec
		reports  [][]*pb.ExecutionReport
		produced = map[string][]string{} // vertex -> results it produces
		slot     = make([]int32, len(sims))
		n        int
	)
	reports = make([][]*pb.ExecutionReport, len(sims))
	ts := time.Now().UnixMilli()
	found := false
	j.A.State.WithJob(jobID, func(rec *pb.JobRecord) {
		found = true
		for _, r := range rec.ExecutionGraph.GetResults() {
			produced[r.ProducerVertexId] = append(produced[r.ProducerVertexId], r.ResultId)
		}
		// Region by region where regions are subtask indexes (FORWARD chains): index-major.
		vs, maxP := rec.ExecutionGraph.GetVertices(), 0
		for _, v := range vs {
			maxP = max(maxP, len(v.Subtasks))
		}
		for sub := 0; sub < maxP; sub++ {
			for _, v := range vs {
				if sub >= len(v.Subtasks) || v.Subtasks[sub].GetCurrent() != nil {
					continue
				}
				ev := v.Subtasks[sub]
				i := n % len(sims)
				sim := sims[i]
				a := &pb.AttemptSpec{VertexId: ev.VertexId, SubtaskIndex: ev.SubtaskIndex, AttemptId: attemptID(jobID, n+1),
					Slot: &pb.SlotID{TmId: sim.ID, Index: slot[i]}, TmGrpcAddress: sim.Addr, TmDataAddress: sim.Addr}
				slot[i]++
				n++
				pending = append(pending, a)
				rep := &pb.ExecutionReport{JobId: jobID, VertexId: a.VertexId, SubtaskIndex: a.SubtaskIndex, AttemptId: a.AttemptId,
					StartTimestamp: ts, State: pb.ExecutionState_EXECUTION_STATE_RUNNING, SlotIndex: a.Slot.Index}
				for _, rid := range produced[ev.VertexId] {
					rep.Produced = append(rep.Produced, &pb.ProducedPartitionReport{ResultId: rid, PartitionIndex: ev.SubtaskIndex, Consumable: true})
				}
				for _, in := range graph.Inputs(rec.ExecutionGraph, ev) {
					rep.Consumed = append(rep.Consumed, &pb.ConsumedPartitionReport{ResultId: in.ResultId, PartitionIndex: in.PartitionIndex})
				}
				reports[i] = append(reports[i], rep)
			}
		}
	})
	if !found {
		c.T.Fatalf("DeployOnSims: job %s is not on %s", jobID, j.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for start := 0; start < len(pending); start += perEntry {
		part := pending[start:min(start+perEntry, len(pending))]
		create := &pb.CreateAttemptsCommand{JobId: jobID, Timestamp: ts, Attempts: part}
		deploying, running := &pb.UpdateExecutionStatesCommand{}, &pb.UpdateExecutionStatesCommand{}
		for _, a := range part {
			deploying.Updates = append(deploying.Updates, &pb.ExecutionStateUpdate{JobId: jobID, AttemptId: a.AttemptId, State: pb.ExecutionState_EXECUTION_STATE_DEPLOYING, Timestamp: ts})
			running.Updates = append(running.Updates, &pb.ExecutionStateUpdate{JobId: jobID, AttemptId: a.AttemptId, State: pb.ExecutionState_EXECUTION_STATE_RUNNING, Timestamp: ts})
		}
		if _, err := j.A.JM.Commit(ctx, pb.CommandType_COMMAND_TYPE_CREATE_ATTEMPTS, create); err != nil {
			c.T.Fatalf("DeployOnSims: create attempts %d..%d: %v", start, start+len(part), err)
		}
		for _, u := range []*pb.UpdateExecutionStatesCommand{deploying, running} {
			if _, err := j.A.JM.Commit(ctx, pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES, u); err != nil {
				c.T.Fatalf("DeployOnSims: update states %d..%d: %v", start, start+len(part), err)
			}
		}
	}
	for i, s := range sims {
		s.hold(reports[i]...)
	}
	return n
}

// attemptID is a 32-hex-digit attempt id unique across jobs: the job id's first 8 characters
// and a counter.
func attemptID(jobID string, n int) string {
	prefix := (jobID + "00000000")[:8]
	return prefix + fmt.Sprintf("%024x", n)
}

// RunningCount counts the job's executions in RUNNING on replica j without copying the job.
func RunningCount(j *JM, jobID string) (running, total int) {
	j.A.State.WithJob(jobID, func(rec *pb.JobRecord) {
		for _, v := range rec.ExecutionGraph.GetVertices() {
			for _, ev := range v.Subtasks {
				total++
				if ev.GetCurrent().GetState() == pb.ExecutionState_EXECUTION_STATE_RUNNING {
					running++
				}
			}
		}
	})
	return running, total
}
