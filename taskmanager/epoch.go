package taskmanager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// epochWitnessRetry: after the JobMasters were asked about an unannounced epoch, a call with
// another unannounced epoch is refused without asking again for this long, so a stream of calls
// with made-up epochs cannot become a stream of ClusterStatus calls.
const epochWitnessRetry = 250 * time.Millisecond

// errNoEpochWitness: no JobMaster names the epoch as the established leader's.
var errNoEpochWitness = errors.New("no JobMaster names the epoch")

// admit is the first step of every TaskManagerService call. It runs before the call's effect
// and changes nothing:
//
//  1. an epoch below the highest seen → STALE_EPOCH (the caller is a deposed leader);
//  2. a request that fails validation (invalid != nil) → INVALID_ARGUMENT;
//  3. an epoch above the highest seen passes only when announces is set (RequestReport, the new
//     leader's first call) or when a JobMaster names it as the established leader's epoch
//     (ClusterStatus); otherwise → UNANNOUNCED_EPOCH.
//
// The call then takes the mutex and fenceLocked adopts the epoch in the same critical section
// as the effect. So a refused request never raises the epoch, whatever number it carries.
func (tm *TaskManager) admit(ctx context.Context, epoch uint64, call string, invalid error, announces bool) error {
	tm.mu.Lock()
	seen := tm.epoch
	err := tm.staleLocked(epoch, call)
	tm.mu.Unlock()
	if err != nil {
		return err
	}
	if invalid != nil {
		tm.log.Warn("refusing an invalid call", "call", call, "epoch", epoch, "error", invalid)
		return status.Error(codes.InvalidArgument, invalid.Error())
	}
	if epoch <= seen || announces {
		return nil
	}
	if werr := tm.witnessEpoch(ctx, epoch); werr != nil {
		tm.log.Warn("refusing a call with an unannounced epoch", "call", call, "epoch", epoch, "seen", seen, "why", werr)
		return transport.UnannouncedEpochError(epoch, seen)
	}
	return nil
}

// staleLocked refuses an epoch below the highest seen (unless fencing is disabled).
func (tm *TaskManager) staleLocked(epoch uint64, call string) error {
	if epoch >= tm.epoch {
		return nil
	}
	if failpoint.Enabled(failpoint.DisableFencing) {
		tm.log.Warn("failpoint disable-fencing: accepting a call from a stale leader", "call", call, "epoch", epoch, "seen", tm.epoch)
		return nil
	}
	tm.log.Warn("refusing call from a stale leader", "call", call, "epoch", epoch, "seen", tm.epoch)
	return transport.StaleEpochError(epoch, tm.epoch)
}

// fenceLocked runs under the mutex after admit passed: it refuses an epoch that has become
// stale in between and adopts a higher one; an accepted call is leader contact.
func (tm *TaskManager) fenceLocked(epoch uint64, call string) error {
	if err := tm.staleLocked(epoch, call); err != nil {
		return err
	}
	tm.adoptEpochLocked(epoch, call)
	tm.lastContact = time.Now()
	return nil
}

// witnessEpoch asks the JobMasters (the configured ones, those gossip knows, the leader this TM
// follows and the one the LeaderResolver names) whether epoch is the established leader's. Queries are
// serialised; the last named epoch is remembered, and after a query that did not name it, other
// unannounced epochs are refused for epochWitnessRetry without asking.
func (tm *TaskManager) witnessEpoch(ctx context.Context, epoch uint64) error {
	tm.witnessMu.Lock()
	defer tm.witnessMu.Unlock()
	if tm.witness.named == epoch {
		return nil
	}
	if !tm.witness.at.IsZero() && time.Since(tm.witness.at) < epochWitnessRetry {
		return fmt.Errorf("%w (last asked %v ago; it named %d)", errNoEpochWitness, time.Since(tm.witness.at).Round(time.Millisecond), tm.witness.named)
	}
	ctx, cancel := context.WithTimeout(ctx, tm.cfg.RPCTimeout)
	defer cancel()
	named, err := tm.namedEpoch(ctx, epoch)
	tm.witness.at = time.Now()
	if named > tm.witness.named || named == epoch {
		tm.witness.named = named
	}
	return err
}

// namedEpoch asks each candidate JobMaster for ClusterStatus until one names an established
// leader with epoch; it returns the highest epoch named.
func (tm *TaskManager) namedEpoch(ctx context.Context, epoch uint64) (uint64, error) {
	tm.mu.Lock()
	leader := tm.leaderAddr
	tm.mu.Unlock()
	cands := tm.jobMasters()
	if leader != "" {
		cands = append(cands, leader)
	}
	if r := tm.cfg.LeaderResolver; r != nil {
		if addr, err := r(ctx); err == nil && addr != "" {
			cands = append(cands, addr)
		}
	}
	var best uint64
	asked := map[string]bool{}
	for _, addr := range cands {
		if asked[addr] || ctx.Err() != nil {
			continue
		}
		asked[addr] = true
		conn, err := tm.conns.get(addr)
		if err != nil {
			continue
		}
		resp, err := pb.NewClientServiceClient(conn).ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		if err != nil || resp.GetLeaderGrpcAddress() == "" {
			continue
		}
		if resp.GetEpoch() == epoch {
			return epoch, nil
		}
		best = max(best, resp.GetEpoch())
	}
	return best, fmt.Errorf("%w: asked %d JobMaster(s), the highest established epoch named is %d", errNoEpochWitness, len(asked), best)
}

// Request validation: every check needs the request alone, so it runs before the TM mutex is
// taken and before any epoch is adopted.

func validateCancel(req *pb.CancelTaskRequest) error {
	if req.GetJobId() == "" || req.GetAttemptId() == "" {
		return errors.New("cancel: job_id and attempt_id are required")
	}
	return nil
}

func validatePartitionInfo(req *pb.UpdatePartitionInfoRequest) error {
	if req.GetJobId() == "" || req.GetConsumerAttemptId() == "" {
		return errors.New("update partition info: job_id and consumer_attempt_id are required")
	}
	for i, c := range req.GetChannels() {
		switch {
		case c == nil:
			return fmt.Errorf("update partition info: channels[%d] is missing", i)
		case c.GetResultId() == "":
			return fmt.Errorf("update partition info: channels[%d]: result_id is empty", i)
		case c.GetPartitionIndex() < 0 || c.GetSubpartitionIndex() < 0:
			return fmt.Errorf("update partition info: channels[%d]: negative partition or subpartition index", i)
		case (c.GetProducerAttemptId() == "") != (c.GetProducerDataAddress() == ""):
			return fmt.Errorf("update partition info: channels[%d]: producer attempt and data address must be given together", i)
		}
	}
	return nil
}

func validateAck(req *pb.AcknowledgeTerminalRequest) error {
	if len(req.GetAttemptIds()) == 0 {
		return errors.New("acknowledge terminal: attempt_ids is empty")
	}
	for i, id := range req.GetAttemptIds() {
		if id == "" {
			return fmt.Errorf("acknowledge terminal: attempt_ids[%d] is empty", i)
		}
	}
	return nil
}

func validateReport(req *pb.RequestReportRequest) error {
	if req.GetChunkSize() < 0 {
		return fmt.Errorf("request report: chunk_size %d < 0", req.GetChunkSize())
	}
	if addr := req.GetLeaderGrpcAddress(); addr != "" {
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			return fmt.Errorf("request report: leader_grpc_address %q is not host:port", addr)
		}
	}
	return nil
}
