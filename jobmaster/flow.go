package jobmaster

import (
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The data flow of the running subtasks, measured from the counters the TaskManagers'
// heartbeats carry (pb.DeployedExecution: records in and out, the time blocked on a full
// subpartition, the watermark, the dead letters; cumulative per attempt, on the TM's flow
// clock). The term keeps the last two samples of each subtask in memory and nothing else:
// nothing is committed, a new leader starts empty and has every rate after two heartbeats of
// each TaskManager. A job view derives per-vertex figures from the pairs (Flow).

// VertexFlow is one vertex's data flow: summed over its subtasks that have two samples.
type VertexFlow struct {
	VertexID string
	// Subtasks: the subtasks measured (two samples of the same attempt, the newer one fresh).
	Subtasks int
	// RecordsInPerS and RecordsOutPerS: the sum over the subtasks of the records between their
	// last two samples divided by the time between them (the TM's clock).
	RecordsInPerS, RecordsOutPerS float64
	// Backpressure: the highest share, over the subtasks, of the time between the two samples
	// that the subtask waited for space in a full subpartition of its output (0..1). The
	// highest, not the mean: one subtask held back by a skewed key is what to look at.
	Backpressure float64
	// Watermark: the lowest of the subtasks' watermarks (unix ms); 0 while any has none.
	Watermark int64
	// DeadLetters: the records the subtasks' current attempts sent to the dead-letter output.
	DeadLetters int64
}

type flowKey struct {
	vertex  string
	subtask int32
}

// flowPlace is where the graph has a running attempt: its job, vertex and subtask.
type flowPlace struct {
	job string
	key flowKey
}

// flowSample is one heartbeat's cumulative counters of a subtask that rates are taken between.
type flowSample struct {
	clock            int64 // the TM's flow clock, ns
	in, out, blocked int64
}

// flowEntry is one subtask's last two samples, kept by value in its job's map: about 120
// bytes a running subtask, the leader's only memory of each (the attempt is kept as a hash of
// its id, not the id, which would keep the heartbeat's string alive).
type flowEntry struct {
	attempt       uint64 // attemptHash of the sampled attempt's id
	tm            string
	prev, last    flowSample
	watermark, dl int64 // of the last sample
	pair          bool  // prev is set
	at            int64 // when last arrived (the leader's clock, unix ns)
}

// attemptHash is the FNV-1a hash of an attempt id: a new attempt of a subtask starts its
// counters again, and telling it from the sampled one is all the hash is for.
func attemptHash(id string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return h
}

// flowStore is the term's samples, by job and subtask. Entries not refreshed for staleAfter
// (three heartbeat intervals) do not count and are dropped at the next prune: a finished,
// cancelled or moved attempt stops being reported.
type flowStore struct {
	staleAfter time.Duration

	mu        sync.Mutex
	jobs      map[string]map[flowKey]flowEntry
	lastPrune time.Time
}

func newFlowStore(staleAfter time.Duration) *flowStore {
	return &flowStore{staleAfter: staleAfter, jobs: map[string]map[flowKey]flowEntry{}}
}

// observe records one heartbeat's counters: those of the RUNNING attempts the graph places
// where (attempt id -> job and subtask) on tm. A heartbeat without a flow clock (a TM build
// before the counters) records nothing.
func (s *flowStore) observe(tm string, clock int64, now time.Time, deployed []*pb.DeployedExecution, where map[string]flowPlace) {
	if clock == 0 || len(where) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range deployed {
		p, ok := where[d.AttemptId]
		if !ok || d.State != stRunning {
			continue
		}
		smp := flowSample{clock: clock, in: d.RecordsIn, out: d.RecordsOut, blocked: d.BlockedNs}
		job := s.jobs[p.job]
		if job == nil {
			job = map[flowKey]flowEntry{}
			s.jobs[p.job] = job
		}
		a := attemptHash(d.AttemptId)
		e, ok := job[p.key]
		if !ok || e.attempt != a || e.tm != tm || clock <= e.last.clock {
			// A new attempt, or the TM's clock started again: the counters start again too.
			job[p.key] = flowEntry{attempt: a, tm: tm, last: smp, watermark: d.WatermarkMs, dl: d.DeadLetters, at: now.UnixNano()}
			continue
		}
		e.prev, e.last, e.pair, e.at = e.last, smp, true, now.UnixNano()
		e.watermark, e.dl = d.WatermarkMs, d.DeadLetters
		job[p.key] = e
	}
	if now.Sub(s.lastPrune) >= s.staleAfter {
		s.lastPrune = now
		for id, job := range s.jobs {
			for k, e := range job {
				if now.UnixNano()-e.at > int64(s.staleAfter) {
					delete(job, k)
				}
			}
			if len(job) == 0 {
				delete(s.jobs, id)
			}
		}
	}
}

// flow is the job's per-vertex flow at now, by vertex id (vertices without a measured subtask
// absent).
func (s *flowStore) flow(jobID string, now time.Time) map[string]VertexFlow {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flowLocked(s.jobs[jobID], now)
}

func (s *flowStore) flowLocked(job map[flowKey]flowEntry, now time.Time) map[string]VertexFlow {
	if len(job) == 0 {
		return nil
	}
	out := map[string]VertexFlow{}
	noWatermark := map[string]bool{}
	for k, e := range job {
		if !e.pair || now.UnixNano()-e.at > int64(s.staleAfter) {
			continue
		}
		secs := float64(e.last.clock-e.prev.clock) / 1e9
		v := out[k.vertex]
		v.VertexID = k.vertex
		v.Subtasks++
		v.RecordsInPerS += float64(max(e.last.in-e.prev.in, 0)) / secs
		v.RecordsOutPerS += float64(max(e.last.out-e.prev.out, 0)) / secs
		bp := min(max(float64(e.last.blocked-e.prev.blocked)/float64(e.last.clock-e.prev.clock), 0), 1)
		v.Backpressure = max(v.Backpressure, bp)
		v.DeadLetters += e.dl
		switch {
		case e.watermark == 0:
			noWatermark[k.vertex] = true
		case v.Watermark == 0 || e.watermark < v.Watermark:
			v.Watermark = e.watermark
		}
		out[k.vertex] = v
	}
	for id := range noWatermark {
		v := out[id]
		v.Watermark = 0
		out[id] = v
	}
	return out
}

// all is every job's per-vertex flow at now (the metrics' read).
func (s *flowStore) all(now time.Time) map[string]map[string]VertexFlow {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]map[string]VertexFlow, len(s.jobs))
	for id, job := range s.jobs {
		if f := s.flowLocked(job, now); len(f) > 0 {
			out[id] = f
		}
	}
	return out
}

// Flow is the job's per-vertex data flow as this leader measures it, by vertex id; nil on a
// node that does not lead, and for a vertex until two heartbeats of one of its running
// subtasks arrived.
func (jm *JobMaster) Flow(jobID string) map[string]VertexFlow {
	t, err := jm.currentTerm()
	if err != nil {
		return nil
	}
	return t.flow.flow(jobID, time.Now())
}

// Flows is every job's per-vertex data flow (Flow), by job id; nil on a node that does not
// lead.
func (jm *JobMaster) Flows() map[string]map[string]VertexFlow {
	t, err := jm.currentTerm()
	if err != nil {
		return nil
	}
	return t.flow.all(time.Now())
}
