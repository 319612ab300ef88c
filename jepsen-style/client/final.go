package client

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// SubmitUntil submits job, retrying indeterminate failures until ctx ends; ALREADY_EXISTS
// counts as success (an earlier try went through).
func SubmitUntil(ctx context.Context, p *Pool, job *pb.JobGraph) error {
	var last error
	for i := 0; ; i++ {
		node := p.nodes[i%len(p.nodes)]
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := p.Client(node).SubmitJob(cctx, &pb.SubmitJobRequest{JobGraph: job})
		cancel()
		if err == nil || status.Code(err) == codes.AlreadyExists {
			return nil
		}
		last = err
		if t, _ := Classify(err); t == "fail" {
			return err
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// ConsistentRead reads a job from the leader (consistent), trying every JM until one answers
// or ctx ends.
func ConsistentRead(ctx context.Context, p *Pool, id string) (*pb.JobRecord, checker.FinalRead) {
	var last error
	for i := 0; ctx.Err() == nil; i++ {
		node := p.nodes[i%len(p.nodes)]
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := p.Client(node).GetJob(cctx, &pb.GetJobRequest{JobId: id, Consistent: true, View: pb.JobView_JOB_VIEW_FULL})
		cancel()
		switch {
		case err == nil:
			rec := resp.GetJob()
			return rec, checker.FinalRead{Found: true, Status: rec.GetStatus().String(), At: time.Now(), Attempts: attemptStates(rec), Ended: attemptsEnded(rec)}
		case status.Code(err) == codes.NotFound:
			return nil, checker.FinalRead{Found: false}
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	msg := "deadline"
	if last != nil {
		msg = last.Error()
	}
	return nil, checker.FinalRead{Err: msg}
}

// attemptStates is the state the graph records for every attempt it holds: each subtask's
// current execution and its history.
func attemptStates(rec *pb.JobRecord) map[string]string {
	out := map[string]string{}
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range v.GetSubtasks() {
			for _, e := range ev.GetHistory() {
				out[e.GetAttemptId()] = strings.TrimPrefix(e.GetState().String(), "EXECUTION_STATE_")
			}
			if e := ev.GetCurrent(); e != nil {
				out[e.GetAttemptId()] = strings.TrimPrefix(e.GetState().String(), "EXECUTION_STATE_")
			}
		}
	}
	return out
}

// attemptsEnded is when each terminal attempt of rec reached its terminal state.
func attemptsEnded(rec *pb.JobRecord) map[string]time.Time {
	out := map[string]time.Time{}
	add := func(e *pb.Execution) {
		for _, st := range e.GetStateTimestamps() {
			switch st.GetState() {
			case pb.ExecutionState_EXECUTION_STATE_FINISHED, pb.ExecutionState_EXECUTION_STATE_CANCELED, pb.ExecutionState_EXECUTION_STATE_FAILED:
				out[e.GetAttemptId()] = time.UnixMilli(st.GetTimestamp())
			}
		}
	}
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range v.GetSubtasks() {
			for _, e := range ev.GetHistory() {
				add(e)
			}
			add(ev.GetCurrent())
		}
	}
	return out
}

// FinalReads reads every id consistently, a few at a time.
func FinalReads(ctx context.Context, p *Pool, ids []string) map[string]checker.FinalRead {
	out := map[string]checker.FinalRead{}
	var mu sync.Mutex
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			_, fr := ConsistentRead(ctx, p, id)
			mu.Lock()
			out[id] = fr
			mu.Unlock()
		}(id)
	}
	wg.Wait()
	return out
}

// HashRounds polls every JM's StateHash until one round has every JM at the same applied index,
// then polls twice more, or until ctx ends.
func HashRounds(ctx context.Context, p *Pool) []checker.HashRound {
	var rounds []checker.HashRound
	extra := -1
	for ctx.Err() == nil && extra != 0 {
		rd := checker.HashRound{Time: time.Now()}
		for _, n := range p.Nodes() {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			resp, err := p.Operator(n).StateHash(cctx, &pb.StateHashRequest{})
			cancel()
			s := checker.HashSample{Node: n}
			if err != nil {
				s.Err = err.Error()
			} else {
				s.Hash, s.Applied = resp.GetHash(), resp.GetAppliedIndex()
			}
			rd.Samples = append(rd.Samples, s)
		}
		sort.Slice(rd.Samples, func(i, j int) bool { return rd.Samples[i].Node < rd.Samples[j].Node })
		rounds = append(rounds, rd)
		if extra > 0 {
			extra--
		} else if extra < 0 && sameApplied(rd) {
			extra = 2
		}
		select {
		case <-ctx.Done():
		case <-time.After(150 * time.Millisecond):
		}
	}
	return rounds
}

func sameApplied(rd checker.HashRound) bool {
	for _, s := range rd.Samples {
		if s.Err != "" || s.Applied != rd.Samples[0].Applied {
			return false
		}
	}
	return len(rd.Samples) > 0
}

// CheckpointViewOf converts a GetJob answer in the checkpoints view; ok is false when it has
// none or the job has not triggered a checkpoint yet.
func CheckpointViewOf(resp *pb.GetJobResponse, node string, consistent bool) (checker.CheckpointView, bool) {
	cv := resp.GetCheckpoints()
	if cv == nil || cv.GetNextCheckpointId() <= 1 {
		return checker.CheckpointView{}, false
	}
	v := checker.CheckpointView{Time: time.Now(), Node: node, ModifyIndex: resp.GetJob().GetModifyIndex(), Consistent: consistent,
		NextID: cv.GetNextCheckpointId(), CompletedCount: cv.GetCompletedCount(), AbortedCount: cv.GetAbortedCount()}
	for _, row := range cv.GetCheckpoints() {
		v.Rows = append(v.Rows, checker.CheckpointRow{ID: row.GetId(), Status: strings.TrimPrefix(row.GetStatus().String(), "CHECKPOINT_STATUS_"),
			Epoch: row.GetEpoch(), TriggerMs: row.GetTriggerUnixMs(), EndMs: row.GetEndUnixMs()})
	}
	return v, true
}

// ReadCheckpoints reads a job's checkpoint view from the leader (consistent), trying every JM
// until one answers or ctx ends; nil when none did or the job has not checkpointed.
func ReadCheckpoints(ctx context.Context, p *Pool, id string) *checker.CheckpointView {
	for i := 0; ctx.Err() == nil; i++ {
		node := p.nodes[i%len(p.nodes)]
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := p.Client(node).GetJob(cctx, &pb.GetJobRequest{JobId: id, Consistent: true, View: pb.JobView_JOB_VIEW_CHECKPOINTS})
		cancel()
		if err == nil {
			if v, ok := CheckpointViewOf(resp, node, true); ok {
				return &v
			}
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}
