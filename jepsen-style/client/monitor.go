package client

import (
	"context"
	"encoding/json"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Observation is one JM's ClusterStatus answer (or its failure) at a time.
type Observation struct {
	Time        time.Time `json:"time"`
	Node        string    `json:"node"`
	Err         string    `json:"err,omitempty"`
	LeaderID    string    `json:"leader_id,omitempty"`
	Epoch       uint64    `json:"epoch,omitempty"`
	RaftState   string    `json:"raft_state,omitempty"`
	Reconciling bool      `json:"reconciling,omitempty"`
	Applied     uint64    `json:"applied,omitempty"`
	Commit      uint64    `json:"commit,omitempty"`
}

// IsLeader reports whether the observed node said it is the Raft leader.
func (o Observation) IsLeader() bool {
	return o.Err == "" && (strings.EqualFold(o.RaftState, "leader") || (o.LeaderID != "" && o.LeaderID == o.Node))
}

// Monitor polls every JM's ClusterStatus and the streaming job's status.
type Monitor struct {
	pool     *Pool
	jobID    string
	interval time.Duration
	out      io.Writer

	// OnRound, when set before Run, is called with every round of observations, in the
	// monitor's goroutine (it must not block: the stall watch hands its dumps to a goroutine).
	OnRound func(at time.Time, round []Observation)

	mu     sync.Mutex
	obs    []Observation
	status []checker.StatusSample
	views  []checker.CheckpointView
}

// NewMonitor polls every interval (0 means 250ms), logging observations as JSON lines to out
// (may be nil).
func NewMonitor(pool *Pool, jobID string, interval time.Duration, out io.Writer) *Monitor {
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	return &Monitor{pool: pool, jobID: jobID, interval: interval, out: out}
}

// Run polls until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		m.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll takes one round of observations and returns them. The streaming job is read from the
// JM that answered with the highest applied index (the most recent state; the first that
// answers the read), in its checkpoints view (the job's status and its checkpoint record): any
// replica's record is a state of the one log, ordered by its modify index, so the
// checkpoint-ids checker needs no consistent read.
func (m *Monitor) Poll(ctx context.Context) []Observation {
	round := m.Status(ctx)
	if m.OnRound != nil {
		m.OnRound(time.Now(), round)
	}
	var sample *checker.StatusSample
	var view *checker.CheckpointView
	byApplied := append([]Observation(nil), round...)
	sort.SliceStable(byApplied, func(i, j int) bool { return byApplied[i].Applied > byApplied[j].Applied })
	for _, o := range byApplied {
		if o.Err != "" {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
		resp, err := m.pool.Client(o.Node).GetJob(cctx, &pb.GetJobRequest{JobId: m.jobID, View: pb.JobView_JOB_VIEW_CHECKPOINTS})
		cancel()
		if err == nil {
			sample = &checker.StatusSample{Time: time.Now(), Status: resp.GetJob().GetStatus().String(), Node: o.Node}
			if v, ok := CheckpointViewOf(resp, o.Node, false); ok {
				view = &v
			}
			break
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.obs = append(m.obs, round...)
	if sample != nil {
		m.status = append(m.status, *sample)
	}
	if view != nil {
		m.views = append(m.views, *view)
	}
	if m.out != nil {
		for _, o := range round {
			b, _ := json.Marshal(o)
			_, _ = m.out.Write(append(b, '\n'))
		}
	}
	return round
}

// Status asks every JM for its ClusterStatus, concurrently, with a short timeout.
func (m *Monitor) Status(ctx context.Context) []Observation {
	nodes := m.pool.Nodes()
	out := make([]Observation, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func(i int, n string) {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
			defer cancel()
			resp, err := m.pool.Client(n).ClusterStatus(cctx, &pb.ClusterStatusRequest{})
			o := Observation{Time: time.Now(), Node: n}
			if err != nil {
				o.Err = err.Error()
			} else {
				o.LeaderID, o.Epoch, o.RaftState = resp.GetLeaderId(), resp.GetEpoch(), resp.GetRaftState()
				o.Reconciling, o.Applied, o.Commit = resp.GetReconciling(), resp.GetAppliedIndex(), resp.GetCommitIndex()
			}
			out[i] = o
		}(i, n)
	}
	wg.Wait()
	return out
}

// Leader asks every JM now and returns the node that says it is the leader with the highest
// epoch, or "".
func (m *Monitor) Leader(ctx context.Context) string {
	best, epoch := "", uint64(0)
	for _, o := range m.Status(ctx) {
		if o.IsLeader() && (best == "" || o.Epoch > epoch) {
			best, epoch = o.Node, o.Epoch
		}
	}
	return best
}

// Observations returns every observation so far.
func (m *Monitor) Observations() []Observation {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Observation(nil), m.obs...)
}

// JobStatuses returns the streaming job's status samples so far.
func (m *Monitor) JobStatuses() []checker.StatusSample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]checker.StatusSample(nil), m.status...)
}

// CheckpointViews returns the streaming job's checkpoint views so far (those of a job that has
// not checkpointed yet are left out).
func (m *Monitor) CheckpointViews() []checker.CheckpointView {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]checker.CheckpointView(nil), m.views...)
}
