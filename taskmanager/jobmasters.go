package taskmanager

import (
	"context"
	"slices"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// jobMasters asks the JobMasters who leads: the configured ones (--jm), those gossip knows
// (Config.DiscoverJobMasters) and the one the LeaderResolver names. Leader contact resolves the
// leader with it; fencing asks it for the established leader and its epoch.
type jobMasters struct {
	cfg   Config
	conns *connPool
}

// list is the JobMasters to ask for the leader: the configured ones, then those
// DiscoverJobMasters knows, each once.
func (j *jobMasters) list() []string {
	out := append([]string(nil), j.cfg.JobMasters...)
	if d := j.cfg.DiscoverJobMasters; d != nil {
		for _, a := range d() {
			if a != "" && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// status asks the JobMaster at addr for its ClusterStatus.
func (j *jobMasters) status(ctx context.Context, addr string) (*pb.ClusterStatusResponse, error) {
	conn, err := j.conns.get(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewClientServiceClient(conn).ClusterStatus(ctx, &pb.ClusterStatusRequest{})
}

// resolved is the address the LeaderResolver names, or "".
func (j *jobMasters) resolved(ctx context.Context) string {
	if r := j.cfg.LeaderResolver; r != nil {
		if addr, err := r(ctx); err == nil && addr != "" {
			return addr
		}
	}
	return ""
}

// resolve asks the LeaderResolver, then each JobMaster's ClusterStatus (an unreachable one is
// skipped: another may name the leader).
func (j *jobMasters) resolve(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, j.cfg.RPCTimeout)
	defer cancel()
	if addr := j.resolved(ctx); addr != "" {
		return addr, nil
	}
	for _, jm := range j.list() {
		resp, err := j.status(ctx, jm)
		if err == nil && resp.GetLeaderGrpcAddress() != "" {
			return resp.GetLeaderGrpcAddress(), nil
		}
	}
	return "", ErrNoLeader
}

// established asks the JobMasters for the established leader and its epoch ("" when none
// names one).
func (j *jobMasters) established(ctx context.Context) (string, uint64) {
	for _, jm := range j.list() {
		resp, err := j.status(ctx, jm)
		if err == nil && resp.GetLeaderGrpcAddress() != "" {
			return resp.GetLeaderGrpcAddress(), resp.GetEpoch()
		}
	}
	return "", 0
}
