package fsm

import "github.com/jmcluster/jmcluster/transport/pb"

// CheckpointCounts are the checkpoints of the jobs in the state, kept as the checkpoint
// commands apply, as jobs are removed and as a snapshot is restored (the metrics read them
// without walking the jobs; FuzzApply checks them against a walk).
type CheckpointCounts struct {
	// Pending: pending now. Completed and Aborted: since each job's submission (its record's
	// completed_count and aborted_count), summed over the jobs in the state.
	Pending, Completed, Aborted int64
	// Newest is the most recently completed checkpoint of any job in the state (the latest
	// completion time; a tie goes to the greater job id), nil when there is none.
	Newest *CompletedCheckpoint
}

// CompletedCheckpoint sums up one completed checkpoint.
type CompletedCheckpoint struct {
	JobID                         string
	ID                            uint64
	TriggerUnixMs, CompleteUnixMs int64
	// SizeBytes is the sum of the acknowledged states' sizes.
	SizeBytes int64
	// MaxAlignmentUs is the longest barrier alignment of its tasks, in microseconds.
	MaxAlignmentUs int64
}

// ckSummary is what one job adds to the counts.
type ckSummary struct {
	pending, completed, aborted int64
	last                        *CompletedCheckpoint
}

func completedOf(jobID string, ck *pb.CheckpointRecord) *CompletedCheckpoint {
	c := &CompletedCheckpoint{JobID: jobID, ID: ck.Id, TriggerUnixMs: ck.TriggerUnixMs, CompleteUnixMs: ck.CompleteUnixMs}
	for _, a := range ck.Acks {
		c.SizeBytes += a.StateSizeBytes
		c.MaxAlignmentUs = max(c.MaxAlignmentUs, a.AlignmentUs)
	}
	return c
}

// newer orders completions by completion time, then job id, then id.
func newer(a, b *CompletedCheckpoint) bool {
	if a.CompleteUnixMs != b.CompleteUnixMs {
		return a.CompleteUnixMs > b.CompleteUnixMs
	}
	if a.JobID != b.JobID {
		return a.JobID > b.JobID
	}
	return a.ID > b.ID
}

// recountCheckpoints brings the counts up to date with one job's checkpoint record (after a
// checkpoint command changed it, the job was restored, or it was removed: then it is gone).
// O(1) unless the job's newest completed checkpoint changed (its acknowledgements are summed)
// or the job held the newest completion and no longer does (the other jobs' are compared).
func (s *state) recountCheckpoints(jobID string) {
	old := s.counts.ckJobs[jobID]
	var now ckSummary
	cp := s.jobs[jobID].GetCheckpoints()
	if cp != nil {
		now = ckSummary{pending: int64(len(cp.Pending)), completed: int64(cp.CompletedCount), aborted: int64(cp.AbortedCount)}
		if n := len(cp.Completed); n > 0 {
			if last := cp.Completed[n-1]; old.last != nil && old.last.ID == last.Id {
				now.last = old.last
			} else {
				now.last = completedOf(jobID, last)
			}
		}
		s.counts.ckJobs[jobID] = now
	} else {
		delete(s.counts.ckJobs, jobID)
	}
	s.counts.ckPending += now.pending - old.pending
	s.counts.ckCompleted += now.completed - old.completed
	s.counts.ckAborted += now.aborted - old.aborted
	switch newest := s.counts.ckNewest; {
	case now.last != nil && (newest == nil || newer(now.last, newest)):
		s.counts.ckNewest = now.last
	case newest != nil && newest.JobID == jobID && newest != now.last:
		s.counts.ckNewest = nil
		for _, j := range s.counts.ckJobs {
			if j.last != nil && (s.counts.ckNewest == nil || newer(j.last, s.counts.ckNewest)) {
				s.counts.ckNewest = j.last
			}
		}
	}
}

// CheckpointCounts returns the checkpoint counts (kept by every change: no walk of the jobs).
func (f *FSM) CheckpointCounts() CheckpointCounts {
	f.mu.RLock()
	defer f.mu.RUnlock()
	c := CheckpointCounts{Pending: f.st.counts.ckPending, Completed: f.st.counts.ckCompleted, Aborted: f.st.counts.ckAborted}
	if n := f.st.counts.ckNewest; n != nil {
		cp := *n
		c.Newest = &cp
	}
	return c
}
