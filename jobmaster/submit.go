package jobmaster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// submitLogNames is how many attempts the "deploying" log line names (the rest are counted).
const submitLogNames = 16

// submitEachParallel bounds the SubmitTask calls in flight per TM when a TM does not serve
// SubmitTasks (an older TaskManager).
const submitEachParallel = 8

// submitCommitted sends the attempts whose creation and DEPLOYING state are committed, with
// descriptors built from the committed state. The attempts going to one TM travel in
// SubmitTasks batches, bounded by SubmitBatchTasks and SubmitBatchBytes, at most
// submitBatchesInFlight at once per TM (TMs in parallel), so each call's deadline covers only
// its own batch.
func (t *term) submitCommitted(jobID string, attempts []*pb.AttemptSpec) error {
	names := make([]string, 0, min(len(attempts), submitLogNames))
	for _, a := range attempts[:min(len(attempts), submitLogNames)] {
		names = append(names, fmt.Sprintf("%s[%d]#%d@%s/%d", a.VertexId, a.SubtaskIndex, a.AttemptNumber, a.Slot.GetTmId(), a.Slot.GetIndex()))
	}
	if n := len(attempts) - len(names); n > 0 {
		names = append(names, fmt.Sprintf("and %d more", n))
	}
	t.jm.log.Info("deploying", "job", jobID, "tasks", len(attempts), "attempts", strings.Join(names, " "))

	// In flight from now on: a heartbeat while the descriptors are built does not count them
	// missing (they are unmarked as their batches are answered, or failed).
	t.mu.Lock()
	for _, a := range attempts {
		t.submitting[a.AttemptId] = true
	}
	t.mu.Unlock()
	// Descriptors are built under the FSM's read lock from the committed record (each copies
	// what it takes), sparing a copy of the whole job.
	type built struct {
		a   *pb.AttemptSpec
		tdd *pb.TaskDeploymentDescriptor
		err error
	}
	descs := make([]built, len(attempts))
	var shared []*pb.SharedChannels
	if !t.jm.state.WithJob(jobID, func(committed *pb.JobRecord) {
		b := graph.NewDescriptorBuilder(committed)
		damaged := damagedCheckpoints(committed) // a region restores past a damaged checkpoint
		for i, a := range attempts {
			tdd, err := b.Build(a.VertexId, a.SubtaskIndex)
			if err == nil {
				err = restoreDescriptor(committed, damaged, tdd)
			}
			descs[i] = built{a, tdd, err}
		}
		shared = b.Shared
	}) {
		return fmt.Errorf("job %s vanished", jobID)
	}
	sharedSize := make([]int, len(shared))
	for i, l := range shared {
		sharedSize[i] = proto.Size(l)
	}
	budget := t.jm.cfg.SubmitBatchBytes
	byTM := map[string][]*pb.TaskDeploymentDescriptor{}
	var order []string
	for _, b := range descs {
		a, tdd := b.a, b.tdd
		if b.err == nil && !t.takesSharedChannels(a.Slot.GetTmId()) {
			b.err = graph.InlineShared(tdd, shared)
		}
		if b.err != nil {
			t.notSubmitting(a.AttemptId)
			t.failAsync(jobID, a.AttemptId, "deployment descriptor: "+b.err.Error())
			continue
		}
		if n := descriptorSize(tdd, sharedSize); n > budget {
			t.notSubmitting(a.AttemptId)
			t.failAsync(jobID, a.AttemptId, fmt.Sprintf("deployment descriptor of %s[%d] is %d bytes with the channel lists it refers to, over SubmitBatchBytes (%d bytes; by default the %d-byte message limit minus its margin)",
				a.VertexId, a.SubtaskIndex, n, budget, transport.ChunkedMessageLimit))
			continue
		}
		if byTM[a.TmGrpcAddress] == nil {
			order = append(order, a.TmGrpcAddress)
		}
		byTM[a.TmGrpcAddress] = append(byTM[a.TmGrpcAddress], tdd)
	}
	for _, addr := range order {
		tdds := byTM[addr]
		t.spawn(func() {
			batches := submitBatches(tdds, t.jm.cfg.SubmitBatchTasks, budget, shared, sharedSize)
			sem := make(chan struct{}, submitBatchesInFlight)
			var wg sync.WaitGroup
			for _, b := range batches {
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					t.sendBatch(jobID, addr, b)
				}()
			}
			wg.Wait()
		})
	}
	return nil
}

// submitBatchesInFlight bounds the SubmitTasks calls in flight to one TM. More than one: a TM
// answers a batch once it has started its tasks, and those tasks' start-up competes with the
// next batch's decoding, so a deployment of several batches to one TM sent one after the other
// waited for each answer in turn (a 512 x 512 job: 250 ms per batch on the TM that holds most
// of it). Each call's deadline still covers its own batch only.
const submitBatchesInFlight = 4

// takesSharedChannels reports whether the TM registered with a protocol that reads shared
// channel lists (a TM not registered with this leader yet is sent channels inline).
func (t *term) takesSharedChannels(tmID string) bool {
	tm, ok := t.jm.tms.Get(tmID)
	return ok && tm.Protocol >= SharedChannelsProtocol
}

// descriptorSize is the encoded size of tdd in a SubmitTasksRequest with the shared channel
// lists it refers to.
func descriptorSize(tdd *pb.TaskDeploymentDescriptor, sharedSize []int) int {
	n := protowire.SizeTag(2) + protowire.SizeBytes(proto.Size(tdd))
	seen := map[uint32]bool{}
	for _, g := range tdd.Inputs {
		if r := g.SharedChannels; r != 0 && !seen[r] {
			seen[r] = true
			n += protowire.SizeTag(3) + protowire.SizeBytes(sharedSize[r-1])
		}
	}
	return n
}

// submitBatch is one SubmitTasks call's tasks and the channel lists they refer to.
type submitBatch struct {
	tasks  []*pb.TaskDeploymentDescriptor
	shared []*pb.SharedChannels
}

// submitBatches splits descriptors into batches of at most maxTasks tasks whose encoded
// SubmitTasksRequest, with the shared channel lists its tasks refer to, stays within
// maxBytes; each batch carries those lists, and its gates' references are renumbered into
// them (each descriptor is in one batch). Every descriptor fits alone with its lists
// (submitCommitted fails the ones that do not).
func submitBatches(tdds []*pb.TaskDeploymentDescriptor, maxTasks, maxBytes int, shared []*pb.SharedChannels, sharedSize []int) []submitBatch {
	overhead := protowire.SizeTag(1) + protowire.SizeVarint(^uint64(0)) // the epoch
	var out []submitBatch
	cur := submitBatch{}
	size := overhead
	index := map[uint32]uint32{} // job-level list -> the batch's, both 1-based
	flush := func() {
		out = append(out, cur)
		cur, size = submitBatch{}, overhead
		clear(index)
	}
	for _, d := range tdds {
		n := protowire.SizeTag(2) + protowire.SizeBytes(proto.Size(d))
		var lists []uint32
		for _, g := range d.Inputs {
			if r := g.SharedChannels; r != 0 && index[r] == 0 && !slices.Contains(lists, r) {
				lists = append(lists, r)
				n += protowire.SizeTag(3) + protowire.SizeBytes(sharedSize[r-1])
			}
		}
		if len(cur.tasks) > 0 && (len(cur.tasks) >= maxTasks || size+n > maxBytes) {
			flush()
			lists = lists[:0]
			n = protowire.SizeTag(2) + protowire.SizeBytes(proto.Size(d))
			for _, g := range d.Inputs {
				if r := g.SharedChannels; r != 0 && !slices.Contains(lists, r) {
					lists = append(lists, r)
					n += protowire.SizeTag(3) + protowire.SizeBytes(sharedSize[r-1])
				}
			}
		}
		for _, r := range lists {
			cur.shared = append(cur.shared, shared[r-1])
			index[r] = uint32(len(cur.shared))
		}
		for _, g := range d.Inputs {
			if g.SharedChannels != 0 {
				g.SharedChannels = index[g.SharedChannels]
			}
		}
		cur.tasks = append(cur.tasks, d)
		size += n
	}
	if len(cur.tasks) > 0 {
		out = append(out, cur)
	}
	return out
}

// submitRetryable: a batch whose call failed this way may have reached the TM or not; sending
// it again is safe (a redelivered attempt id is accepted as it is).
func submitRetryable(err error) bool {
	if transport.IsStaleEpoch(err) {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// sendBatch submits one batch, retrying a transient failure up to SubmitAttempts calls. Tasks
// the TM refused, and every task of a batch that could not be delivered, are committed FAILED
// (their region restarts under the restart strategy).
func (t *term) sendBatch(jobID, addr string, b submitBatch) {
	batch := b.tasks
	var resp *pb.SubmitTasksResponse
	var err error
	failpoint.Inject(t.ctx, failpoint.BeforeSubmitTask)
	for attempt := 1; ; attempt++ {
		err = t.jm.tms.Call(t.ctx, addr, func(ctx context.Context, c pb.TaskManagerServiceClient) error {
			var err error
			resp, err = c.SubmitTasks(ctx, &pb.SubmitTasksRequest{Epoch: t.epoch, Tasks: batch, SharedChannels: b.shared})
			return err
		})
		if err == nil || attempt >= t.jm.cfg.SubmitAttempts || !submitRetryable(err) || t.ctx.Err() != nil {
			break
		}
		t.jm.log.Info("submit batch failed; sending it again", "job", jobID, "tm", addr, "tasks", len(batch), "attempt", attempt, "error", logsum.Text(err.Error()))
		select {
		case <-t.ctx.Done():
		case <-time.After(t.jm.cfg.RetryAfter):
		}
	}
	if status.Code(err) == codes.Unimplemented {
		for _, d := range batch {
			_ = graph.InlineShared(d, b.shared) // its references are into b.shared
		}
		t.submitEach(jobID, addr, batch)
		return
	}
	t.doneSubmitting(batch)
	if t.ctx.Err() != nil {
		return
	}
	var failed []*pb.ExecutionStateUpdate
	for i, d := range batch {
		cause := ""
		switch {
		case err != nil:
			cause = "deploy to " + addr + " failed: " + err.Error()
		case i >= len(resp.GetResults()):
			cause = fmt.Sprintf("deploy to %s failed: the TM answered %d results for %d tasks", addr, len(resp.GetResults()), len(batch))
		case resp.Results[i].GetCode() != int32(codes.OK):
			r := resp.Results[i]
			cause = fmt.Sprintf("deploy to %s failed: %s: %s", addr, codes.Code(r.GetCode()), r.GetMessage())
			if busy := r.GetBusyWithAttemptId(); busy != "" && !t.ownsLive(r.GetBusyWithJobId(), busy, addr) {
				// The slot is held by an attempt the graph has already ended (its TM has not yet
				// been told): cancel it there and stop this attempt without counting a restart,
				// so the region deploys again once the slot is free.
				t.cancelOnTM(addr, r.GetBusyWithJobId(), busy)
				why := cause + "; that attempt is no longer the graph's: cancelled it, the region deploys again"
				failed = append(failed,
					&pb.ExecutionStateUpdate{JobId: jobID, AttemptId: d.AttemptId, State: stCanceling, Timestamp: nowMillis(), FailureCause: why},
					&pb.ExecutionStateUpdate{JobId: jobID, AttemptId: d.AttemptId, State: stCanceled, Timestamp: nowMillis(), FailureCause: why})
				continue
			}
		default:
			continue
		}
		failed = append(failed, &pb.ExecutionStateUpdate{JobId: jobID, AttemptId: d.AttemptId, State: stFailed, FailureCause: cause, Timestamp: nowMillis()})
	}
	if len(failed) > 0 {
		t.jm.log.Warn("submit failed", "job", jobID, "tm", addr, "tasks", len(failed), "of", len(batch), "first_cause", failed[0].FailureCause)
		t.batch.commit(t.ctx, failed)
	}
}

// submitEach deploys a batch with one SubmitTask call per task, at most submitEachParallel at
// once (a TM without SubmitTasks).
func (t *term) submitEach(jobID, addr string, batch []*pb.TaskDeploymentDescriptor) {
	sem := make(chan struct{}, submitEachParallel)
	var wg sync.WaitGroup
	for _, d := range batch {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := t.jm.tms.Call(t.ctx, addr, func(ctx context.Context, c pb.TaskManagerServiceClient) error {
				_, err := c.SubmitTask(ctx, &pb.SubmitTaskRequest{Epoch: t.epoch, Task: d})
				return err
			})
			t.doneSubmitting([]*pb.TaskDeploymentDescriptor{d})
			if err != nil && t.ctx.Err() == nil {
				t.jm.log.Warn("submit failed", "job", jobID, "vertex", d.VertexId, "subtask", d.SubtaskIndex, "tm", addr, "error", err)
				t.fail(jobID, d.AttemptId, "deploy to "+addr+" failed: "+err.Error())
			}
		}()
	}
	wg.Wait()
}

// notSubmitting ends the in-flight mark of an attempt that is failed instead of sent.
func (t *term) notSubmitting(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.submitting, id)
}

// doneSubmitting ends the in-flight mark of a batch's attempts and records when the TM
// answered (checkDeployment's grace).
func (t *term) doneSubmitting(batch []*pb.TaskDeploymentDescriptor) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range batch {
		delete(t.submitting, d.AttemptId)
		t.acked[d.AttemptId] = now
	}
}

// ownsLive reports whether attemptID is the current, non-terminal attempt of its job's graph,
// placed on the TM at addr.
func (t *term) ownsLive(jobID, attemptID, addr string) bool {
	owned := false
	t.jm.state.WithJob(jobID, func(rec *pb.JobRecord) {
		if ev := graph.FindAttempt(rec.ExecutionGraph, attemptID); ev != nil {
			owned = !isTerminal(ev.Current.GetState()) && ev.Current.GetTmGrpcAddress() == addr
		}
	})
	return owned
}
