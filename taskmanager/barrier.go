package taskmanager

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/operator"
)

// Checkpoint barriers (docs/checkpoints.md). A source task injects the barrier of a triggered
// checkpoint in front of its next record: it snapshots its position, sends the barrier down
// every output subpartition, and hands the state on to be written and acknowledged. A task
// with inputs aligns: a channel that delivered the barrier is held back (its later records
// wait in the aligner) until every live channel has delivered it; the task then snapshots its
// operator, forwards the barrier and replays what it held. Only the task's goroutine touches
// an aligner.

// MaxAlignedRecords bounds the records one task holds back while it aligns a checkpoint's
// barriers. A task that would hold more declines the checkpoint (Flink's
// execution.checkpointing.aligned-checkpoint-timeout is the time-based sibling of this limit).
const MaxAlignedRecords = 1 << 20

// aligner aligns the barriers of a task's input channels. The task's loop calls feed for each
// channel's records and ended for each channel that ends, then drain, which replays what an
// alignment held back once it is over.
type aligner struct {
	live     func() int // the channels that have not ended
	process  func(operator.Record) error
	reached  func(id uint64, alignment time.Duration) error // the barrier of id is aligned, after alignment
	declined func(id uint64, cause string)
	maxHeld  int // 0: MaxAlignedRecords
	// aligned is told how long each completed alignment took, from the first barrier of its
	// checkpoint to the last (metrics; optional). Only barriers read the clock.
	aligned func(time.Duration)
	now     func() time.Time // nil: time.Now

	id      uint64       // the checkpoint being aligned, 0: none
	last    uint64       // the newest checkpoint this task snapshotted or gave up
	blocked map[int]bool // channels that delivered id's barrier
	held    map[int][]operator.Record
	nheld   int
	since   time.Time // when the first barrier of id arrived
	pending []heldRun // held records to replay, in channel order per alignment

	// wm is the task's watermark (nil: watermarks are dropped). A channel's watermarks
	// and its end reach it in order with the channel's records: the end of a channel whose
	// records are held back or pending counts once they are replayed (heldEnd, heldRun.end).
	wm      *taskClock
	heldEnd map[int]bool
}

// heldRun is a channel's held-back records to replay; end: the channel ended after them.
type heldRun struct {
	ch  int
	rs  []operator.Record
	end bool
}

// feed handles records that channel ch delivered, in order: data goes to process while the
// channel is not held back; a barrier is aligned.
func (a *aligner) feed(ch int, rs []operator.Record) error {
	for i, r := range rs {
		if a.id != 0 && a.blocked[ch] {
			if limit := cmp.Or(a.maxHeld, MaxAlignedRecords); a.nheld+len(rs)-i > limit {
				a.giveUp(fmt.Sprintf("aligning its barriers would hold back more than %d records (MaxAlignedRecords)", limit))
				a.pending = append(a.pending, heldRun{ch: ch, rs: rs[i:]}) // behind ch's held records
				return nil
			}
			a.held[ch] = append(a.held[ch], rs[i:]...)
			a.nheld += len(rs) - i
			return nil
		}
		if r.Watermark {
			// A watermark never reaches an operator: the task's clock takes it.
			if a.wm != nil {
				if err := a.wm.apply(a.wm.watermark(ch, r)); err != nil {
					return err
				}
			}
			continue
		}
		if r.Barrier == 0 {
			if a.wm != nil && a.wm.idle > 0 {
				if err := a.wm.apply(a.wm.data(ch)); err != nil {
					return err
				}
			}
			if err := a.process(r); err != nil {
				return err
			}
			continue
		}
		if err := a.barrier(ch, r.Barrier); err != nil {
			return err
		}
	}
	return nil
}

// barrier takes channel ch's barrier of checkpoint id.
func (a *aligner) barrier(ch int, id uint64) error {
	if id <= a.last {
		return nil // of a checkpoint this task is done with or gave up
	}
	if a.id != 0 && id > a.id {
		// A newer checkpoint overtook the one being aligned: the older one is given up.
		a.giveUp(fmt.Sprintf("the barrier of checkpoint %d arrived before it was aligned", id))
	}
	if a.id == 0 {
		a.id, a.blocked, a.held, a.nheld = id, map[int]bool{}, map[int][]operator.Record{}, 0
		a.since = a.clock()
	}
	a.blocked[ch] = true
	return a.check()
}

func (a *aligner) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

// ended notes that channel ch ended: it needs no barrier any more.
func (a *aligner) ended(ch int) error {
	if err := a.clockEnd(ch); err != nil {
		return err
	}
	if a.id == 0 || !a.blocked[ch] {
		return a.check()
	}
	delete(a.blocked, ch)
	return a.check()
}

// clockEnd tells the task's clock that channel ch ended, behind the channel's records still
// held back or waiting to be replayed.
func (a *aligner) clockEnd(ch int) error {
	if a.wm == nil {
		return nil
	}
	if a.id != 0 && a.blocked[ch] {
		if a.heldEnd == nil {
			a.heldEnd = map[int]bool{}
		}
		a.heldEnd[ch] = true
		return nil
	}
	for _, run := range a.pending {
		if run.ch == ch {
			a.pending = append(a.pending, heldRun{ch: ch, end: true})
			return nil
		}
	}
	return a.wm.apply(a.wm.end(ch))
}

// check completes the alignment once every live channel delivered the barrier.
func (a *aligner) check() error {
	if a.id == 0 || len(a.blocked) < a.live() {
		return nil
	}
	id, took := a.id, a.clock().Sub(a.since)
	if a.aligned != nil {
		a.aligned(took)
	}
	a.stop()
	a.last = id
	return a.reached(id, took)
}

// giveUp abandons the alignment in progress and declines its checkpoint; every channel flows
// again.
func (a *aligner) giveUp(cause string) {
	if a.id == 0 {
		return
	}
	if a.declined != nil {
		a.declined(a.id, cause)
	}
	a.last = a.id
	a.stop()
}

// stop ends the alignment; what it held is replayed by drain, channel by channel.
func (a *aligner) stop() {
	chans := make([]int, 0, len(a.held)+len(a.heldEnd))
	for ch := range a.held {
		chans = append(chans, ch)
	}
	for ch := range a.heldEnd {
		if _, ok := a.held[ch]; !ok {
			chans = append(chans, ch)
		}
	}
	slices.Sort(chans)
	for _, ch := range chans {
		a.pending = append(a.pending, heldRun{ch, a.held[ch], a.heldEnd[ch]})
	}
	a.id, a.blocked, a.held, a.nheld, a.heldEnd = 0, nil, nil, 0, nil
}

// drain replays the records given back by the alignments that ended.
func (a *aligner) drain() error {
	for len(a.pending) > 0 {
		run := a.pending[0]
		a.pending = a.pending[1:]
		if err := a.feed(run.ch, run.rs); err != nil {
			return err
		}
		if run.end {
			if err := a.clockEnd(run.ch); err != nil {
				return err
			}
		}
	}
	a.pending = nil
	return nil
}

// injectBarrier is a source task's side: called before each record it emits, it injects the
// barrier of a newly triggered checkpoint.
func (tm *TaskManager) injectBarrier(t *task, last *uint64, reached func(id uint64) error) error {
	id := t.inject.Load()
	if id <= *last {
		return nil
	}
	*last = id
	return reached(id)
}

// checkpointReached is what a task does when checkpoint id's barrier is aligned (or, for a
// source, injected): snapshot x's state, forward the barrier downstream, then persist and
// acknowledge off the task's goroutine. alignment is how long the task's barrier alignment
// took (0 for a source).
func (tm *TaskManager) checkpointReached(ctx context.Context, t *task, id uint64, alignment time.Duration, x any, parts []*dataplane.Partition) error {
	var state []byte
	if st, ok := x.(operator.Stateful); ok {
		var err error
		if state, err = st.SnapshotState(); err != nil {
			tm.declineCheckpoint(t, id, fmt.Sprintf("snapshot: %v", err))
			state = nil
		}
	}
	if c, ok := x.(operator.Committer); ok && t.tdd.GetCheckpointed() {
		if err := c.PrepareCommit(id); err != nil {
			tm.declineCheckpoint(t, id, fmt.Sprintf("stage its output: %v", err))
		}
	}
	for _, p := range parts {
		if err := p.Broadcast(ctx, id); err != nil {
			return err
		}
	}
	tm.persistCheckpoint(t, id, state, alignment)
	return nil
}
