package jmserver

import (
	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/security"

	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/metrics"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Deps are what the gRPC services of one JM replica read and drive.
type Deps struct {
	Node  *cluster.Node
	State *fsm.FSM
	JM    *jobmaster.JobMaster
	// Members lists the gossip pool (nil when gossip is off).
	Members func() []*pb.Member
	// Gossip is this node's seat in the pool (nil when gossip is off): its keyring is served
	// by GossipService, and OperatorService.GossipKeyring fans out from it.
	Gossip *membership.Membership
	// WriteLimit bounds each client's SubmitJob and CancelJob rate on this JM.
	WriteLimit WriteLimit
	// TLS: mutual TLS on the gRPC server (any role may connect; the policy table checks each
	// method), nil for plaintext.
	TLS *security.TLS
	// Tokens: bearer tokens the gRPC server and HTTP accept too (--token-file); nil: none.
	Tokens *security.Tokens
	// MetricsAuth: /metrics, too, needs a token or certificate when HTTP authenticates.
	MetricsAuth bool
	// Audit receives a line for every submit, cancel and Raft membership change this node
	// serves, naming the caller (audit.go); nil: none.
	Audit hclog.Logger
	// Metrics are the node's instruments, served on /metrics with the process's; every gRPC
	// call is observed (its duration, a refusal's reason). nil: /metrics serves the process's.
	Metrics *metrics.JobMaster
}

// ClientService implements pb.ClientServiceServer. The policy table sends writes to the
// established leader (a follower forwards them, after counting them against the caller's
// write limit) and serves reads where they land unless they ask to be consistent.
type ClientService struct {
	pb.UnimplementedClientServiceServer
	d Deps
}

// NewClientService returns the client-facing service.
func NewClientService(d Deps) *ClientService {
	return &ClientService{d: d}
}

func (s *ClientService) SubmitJob(ctx context.Context, req *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error) {
	if req.JobGraph == nil {
		return nil, status.Error(codes.InvalidArgument, "job_graph is required")
	}
	jg := proto.Clone(req.JobGraph).(*pb.JobGraph)
	if failpoint.Enabled(failpoint.AckBeforeCommit) {
		return s.ackSubmitBeforeCommit(jg)
	}
	id, index, err := s.d.JM.SubmitJob(ctx, jg)
	s.d.audit(ctx, "submit job", err, "job", id, "name", jg.GetName(), "index", index)
	if err != nil {
		return nil, err
	}
	return &pb.SubmitJobResponse{JobId: id, Index: index}, nil
}

func (s *ClientService) CancelJob(ctx context.Context, req *pb.CancelJobRequest) (*pb.CancelJobResponse, error) {
	if req.JobId == "" {
		return nil, status.Error(codes.InvalidArgument, "job_id is required")
	}
	if failpoint.Enabled(failpoint.AckBeforeCommit) {
		go func() {
			time.Sleep(ackBeforeCommitDelay)
			_, _ = s.d.JM.CancelJob(context.Background(), req.JobId)
		}()
		return &pb.CancelJobResponse{Status: pb.JobStatus_JOB_STATUS_CANCELLING}, nil
	}
	st, err := s.d.JM.CancelJob(ctx, req.JobId)
	s.d.audit(ctx, "cancel job", err, "job", req.JobId)
	if err != nil {
		return nil, err
	}
	return &pb.CancelJobResponse{Status: st}, nil
}

func (s *ClientService) GetJob(ctx context.Context, req *pb.GetJobRequest) (*pb.GetJobResponse, error) {
	if req.JobId == "" {
		return nil, status.Error(codes.InvalidArgument, "job_id is required")
	}
	return JobView(ctx, s.d, req)
}

func (s *ClientService) ListJobs(ctx context.Context, req *pb.ListJobsRequest) (*pb.ListJobsResponse, error) {
	out := &pb.ListJobsResponse{ServedBy: s.d.Node.ID(), Jobs: jobSummaries(s.d)}
	out.RemovedJobs, _ = s.d.State.RemovedJobs()
	return out, nil
}

// Summary condenses a job record for listings: the job's counts, without per-vertex rows.
func Summary(rec *pb.JobRecord) *pb.JobSummary { return summarize(rec, false) }

// WatchJob sends the job, in the view asked for (the summary by default), at the start and
// whenever its record changes, until the job is globally terminal.
func (s *ClientService) WatchJob(req *pb.WatchJobRequest, stream pb.ClientService_WatchJobServer) error {
	if req.JobId == "" {
		return status.Error(codes.InvalidArgument, "job_id is required")
	}
	if v := req.GetView(); v == pb.JobView_JOB_VIEW_EXECUTIONS {
		return status.Error(codes.InvalidArgument, "view: WatchJob sends the summary or the full record, not pages")
	}
	var last uint64
	first := true
	for {
		changed := s.d.State.Changed()
		var index uint64
		var terminal bool
		if !s.d.State.WithJob(req.JobId, func(rec *pb.JobRecord) {
			index, terminal = rec.ModifyIndex, graph.IsGloballyTerminal(rec.Status)
		}) {
			return status.Errorf(codes.NotFound, "unknown job %s", req.JobId)
		}
		if first || index != last {
			first = false
			last = index
			resp, err := JobView(stream.Context(), s.d, &pb.GetJobRequest{JobId: req.JobId, View: req.GetView()})
			if err != nil {
				return err
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
			if terminal {
				return nil
			}
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

func (s *ClientService) ClusterStatus(ctx context.Context, _ *pb.ClusterStatusRequest) (*pb.ClusterStatusResponse, error) {
	return ClusterStatus(s.d), nil
}

// ClusterStatus describes the cluster as this node sees it (shared with the HTTP view).
func ClusterStatus(d Deps) *pb.ClusterStatusResponse {
	ep := d.State.Epoch()
	out := &pb.ClusterStatusResponse{
		NodeId:       d.Node.ID(),
		Epoch:        ep.Epoch,
		RaftState:    d.Node.State(),
		AppliedIndex: d.Node.AppliedIndex(),
		CommitIndex:  d.Node.CommitIndex(),
	}
	leaderID, _ := d.Node.Leader()
	out.LeaderId = leaderID
	// The leader's address only while this node has fresh evidence that it lives: TaskManagers
	// fence themselves when a JobMaster names an established leader they cannot reach, and a
	// follower names a dead leader until its Raft heartbeat timeout fires. A leader that found
	// its state behind the TaskManagers' epoch (a wiped cluster that established before any
	// TaskManager was in its pool, then was refused as stale) names none: it no longer leads the
	// epoch its state still records.
	out.StateBehind = d.Node.Behind()
	if ep.LeaderId == leaderID && leaderID != "" && d.Node.LeaderIsFresh() && out.StateBehind == "" {
		out.LeaderGrpcAddress = ep.LeaderGrpcAddress
	}
	out.Peers, _ = d.Node.Peers()
	if d.Members != nil {
		states := map[string]string{}
		for _, m := range d.Members() {
			if m.Role == "jobmaster" {
				states[m.Meta["id"]] = m.State
			}
		}
		for _, p := range out.Peers {
			p.State = states[p.Id]
		}
	}
	// A voter the leader's Raft has not heard from for two heartbeat timeouts is unreachable,
	// whatever gossip still says (its suspicion takes seconds more to end).
	// On a follower, the leader it has not heard from for as long (a killed leader, before the
	// next is elected).
	ids := map[string]bool{}
	for id := range d.Node.UnreachablePeers() {
		ids[id] = true
	}
	if id := d.Node.SilentLeader(); id != "" {
		ids[id] = true
	}
	markUnreachable(out.Peers, ids)
	recs := d.State.Reconciliations()
	for _, r := range recs {
		if r.Epoch == ep.Epoch && r.Outcome == "in_progress" {
			out.Reconciling = true
		}
	}
	if d.JM != nil && d.JM.Active() {
		out.Reconciling = d.JM.Reconciling()
	}
	if n := len(recs); n > 10 {
		recs = recs[n-10:]
	}
	out.Reconciliations = recs
	out.TaskManagers = taskManagers(d)
	return out
}

// ClusterView is ClusterStatus for the views of people (the REST view and the web UI): on a
// follower it also takes the leader's verdicts (TakeLeaderVerdicts: the voters the leader's Raft
// marks unreachable, as only the leader heartbeats its followers, and the TaskManagers it
// refused), asked with a short timeout; unanswered, the view keeps gossip's states.
func ClusterView(ctx context.Context, d Deps) *pb.ClusterStatusResponse {
	out := ClusterStatus(d)
	if d.Node.IsLeader() {
		return out
	}
	if out.LeaderGrpcAddress != "" {
		ctx, cancel := context.WithTimeout(ctx, leaderViewTimeout)
		defer cancel()
		if cc, _, err := d.Node.LeaderConn(ctx); err == nil {
			if resp, err := pb.NewClientServiceClient(cc).ClusterStatus(ctx, &pb.ClusterStatusRequest{}); err == nil {
				TakeLeaderVerdicts(out, resp)
			}
		}
	}
	return out
}

// TakeLeaderVerdicts copies into a follower's status what only the leader knows: the voters its
// Raft marks unreachable and the TaskManagers whose registration it refused.
func TakeLeaderVerdicts(out, leader *pb.ClusterStatusResponse) {
	unreachable := map[string]bool{}
	for _, p := range leader.Peers {
		if p.State == PeerUnreachable {
			unreachable[p.Id] = true
		}
	}
	markUnreachable(out.Peers, unreachable)
	for _, lt := range leader.TaskManagers {
		if !strings.HasPrefix(lt.State, RefusedState) {
			continue
		}
		found := false
		for _, t := range out.TaskManagers {
			if t.Id == lt.Id {
				t.State, found = lt.State, true
			}
		}
		if !found {
			out.TaskManagers = append(out.TaskManagers, lt)
		}
	}
	sort.Slice(out.TaskManagers, func(i, j int) bool { return out.TaskManagers[i].Id < out.TaskManagers[j].Id })
}

// leaderViewTimeout bounds a follower's question to the leader for its view of the peers.
const leaderViewTimeout = 500 * time.Millisecond

// PeerUnreachable is the state of a voter Raft has not heard from for two heartbeat timeouts.
const PeerUnreachable = "unreachable"

// markUnreachable sets the state of the peers named (unless gossip already says dead or left).
func markUnreachable(peers []*pb.RaftPeer, ids map[string]bool) {
	for _, p := range peers {
		if ids[p.Id] && p.State != "dead" && p.State != "left" {
			p.State = PeerUnreachable
		}
	}
}

func taskManagers(d Deps) []*pb.TaskManagerInfo {
	byID := taskManagerStates(d)
	used := slotsUsed(d)
	drained := d.State.Drained()
	for id := range drained {
		if byID[id] == nil {
			byID[id] = &pb.TaskManagerInfo{Id: id, State: "unknown"}
		}
	}
	out := make([]*pb.TaskManagerInfo, 0, len(byID))
	for id, info := range byID {
		info.SlotsUsed = used[id]
		info.DrainedSince, info.Drained = drained[id]
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}

// ackBeforeCommitDelay is how far the ack-before-commit failpoint's acknowledgement of a
// SubmitJob or CancelJob runs ahead of its commit.
const ackBeforeCommitDelay = 500 * time.Millisecond

// ackSubmitBeforeCommit is the ack-before-commit failpoint's SubmitJob: it acknowledges the
// submission and commits it ackBeforeCommitDelay later (or never, if leadership moves
// meanwhile), the broken build the fault suite's linearizability and lost-submission checkers
// must catch.
func (s *ClientService) ackSubmitBeforeCommit(jg *pb.JobGraph) (*pb.SubmitJobResponse, error) {
	if jg.JobId == "" {
		jg.JobId = jobmaster.NewJobID()
	}
	go func() {
		time.Sleep(ackBeforeCommitDelay)
		_, _, _ = s.d.JM.SubmitJob(context.Background(), jg)
	}()
	return &pb.SubmitJobResponse{JobId: jg.JobId}, nil
}

// MetricsState is what a JobMaster's gauges read (metrics.JobMasterState), from d as it is at
// the scrape (d may be filled in after this call, before the first scrape).
func MetricsState(d *Deps) metrics.JobMasterState { return metricsState{d} }

type metricsState struct{ d *Deps }

func (m metricsState) Counts() (map[pb.JobStatus]int64, map[pb.ExecutionState]int64) {
	return m.d.State.Counts()
}

func (m metricsState) Checkpoints() fsm.CheckpointCounts { return m.d.State.CheckpointCounts() }

func (m metricsState) Node() (string, bool, uint64, bool, uint64, uint64) {
	d := m.d
	active := d.JM != nil && d.JM.Active()
	return d.Node.ID(), active, d.State.Epoch().GetEpoch(), active && d.JM.Reconciling(), d.Node.AppliedIndex(), d.Node.CommitIndex()
}

// RefusedState starts the state of a TaskManager whose registration the leader refused; the
// reason follows ("refused: slots must be in [1, 1024], got 1025").
const RefusedState = "refused: "

// taskManagerStates are the TaskManagers gossip and (on the leader) the registry know, with
// their addresses, slots and state; not their slots in use.
func taskManagerStates(d Deps) map[string]*pb.TaskManagerInfo {
	byID := map[string]*pb.TaskManagerInfo{}
	if d.Members != nil {
		for _, m := range d.Members() {
			if m.Role != "taskmanager" {
				continue
			}
			id := m.Meta["id"]
			if id == "" {
				id = m.Name
			}
			slots, _ := strconv.Atoi(m.Meta["slots"])
			byID[id] = &pb.TaskManagerInfo{Id: id, GrpcAddress: m.Meta["grpc"], DataAddress: m.Meta["data"], Slots: int32(slots), State: m.State}
		}
	}
	if d.JM != nil && d.JM.Active() {
		for _, tm := range d.JM.Registry().List() {
			info := byID[tm.ID]
			if info == nil {
				info = &pb.TaskManagerInfo{Id: tm.ID, State: "registered"}
				byID[tm.ID] = info
			}
			if tm.GRPCAddr != "" {
				info.GrpcAddress, info.DataAddress = tm.GRPCAddr, tm.DataAddr
			}
			if tm.Slots > 0 {
				info.Slots = tm.Slots
			}
			if tm.Lost {
				info.State = "lost"
			}
		}
		// A refused registration: the TM gets no work, and this says why.
		for id, r := range d.JM.Registry().Refused() {
			info := byID[id]
			if info == nil {
				info = &pb.TaskManagerInfo{Id: id}
				byID[id] = info
			}
			info.State = RefusedState + r.Reason
		}
	}
	return byID
}

// JobsWaiting counts the jobs waiting on this leader by kind of reason (metrics.WaitingState).
func (m metricsState) JobsWaiting() map[string]int {
	d := m.d
	if d.JM == nil || !d.JM.Active() {
		return nil
	}
	out := map[string]int{}
	for k, n := range d.JM.WaitingJobs() {
		out[string(k)] = n
	}
	return out
}

// TaskManagers counts the TaskManagers by state as ClusterStatus lists them, without their
// slots in use (which would walk the executions).
func (m metricsState) TaskManagers() map[string]int {
	out := map[string]int{}
	for _, tm := range taskManagerStates(*m.d) {
		state := tm.State
		if strings.HasPrefix(state, RefusedState) {
			state = "refused" // one series, whatever the reason
		}
		out[state]++
	}
	return out
}
