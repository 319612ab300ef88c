package jobmaster

import (
	"context"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// batcher commits execution-state updates in batches: every update that arrives while one
// batch is being committed goes into the next. Callers wait for their own update's outcome,
// so a TM's update is acknowledged only after it is committed (write-ahead).
type batcher struct {
	t    *term
	reqs chan batchReq
}

type batchReq struct {
	updates []*pb.ExecutionStateUpdate
	reply   chan []string // one error text per update ("" when applied)
}

func newBatcher(t *term) *batcher {
	return &batcher{t: t, reqs: make(chan batchReq, 256)}
}

// commit submits updates and waits for their outcome. On a commit failure (leadership lost,
// timeout) every update gets the error text.
func (b *batcher) commit(ctx context.Context, updates []*pb.ExecutionStateUpdate) []string {
	req := batchReq{updates: updates, reply: make(chan []string, 1)}
	select {
	case b.reqs <- req:
	case <-ctx.Done():
		return fill(len(updates), ctx.Err().Error())
	case <-b.t.ctx.Done():
		return fill(len(updates), ErrNotLeader.Error())
	}
	select {
	case out := <-req.reply:
		return out
	case <-ctx.Done():
		return fill(len(updates), ctx.Err().Error())
	case <-b.t.ctx.Done():
		return fill(len(updates), ErrNotLeader.Error())
	}
}

func (b *batcher) run() {
	max := b.t.jm.cfg.MaxBatch
	for {
		var batch []batchReq
		select {
		case <-b.t.ctx.Done():
			return
		case r := <-b.reqs:
			batch = append(batch, r)
		}
		n := len(batch[0].updates)
	more:
		for n < max {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
				n += len(r.updates)
			default:
				break more
			}
		}
		b.flush(batch)
	}
}

func (b *batcher) flush(batch []batchReq) {
	var all []*pb.ExecutionStateUpdate
	for _, r := range batch {
		all = append(all, r.updates...)
	}
	res, err := b.t.jm.Commit(b.t.ctx, pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES,
		&pb.UpdateExecutionStatesCommand{Updates: all})
	var errs []string
	if err != nil {
		errs = fill(len(all), err.Error())
	} else if r, ok := res.Value.(*pb.UpdateExecutionStatesResult); ok && len(r.Errors) == len(all) {
		errs = r.Errors
	} else {
		errs = fill(len(all), "")
	}
	i := 0
	jobs := map[string]bool{}
	failed := false
	for _, r := range batch {
		r.reply <- errs[i : i+len(r.updates)]
		for _, u := range r.updates {
			jobs[u.JobId] = true
			failed = failed || u.State == stFailed || u.State == stCanceled
		}
		i += len(r.updates)
	}
	for id := range jobs {
		b.t.kick(id)
	}
	if failed {
		b.t.ckpt.poke() // a task failure aborts its job's pending checkpoints
	}
}

func fill(n int, s string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}
