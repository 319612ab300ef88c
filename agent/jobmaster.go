// Package agent assembles one jmcluster process from the packages: a JobMaster replica (Raft
// node, FSM, active JobMaster, reconciler, gRPC and HTTP servers, gossip) or a TaskManager
// (with gossip). The command line and the multi-node tests use the same assembly, so the tests
// exercise the wiring that runs in production. Start and shutdown orders are written here.
package agent

import (
	"github.com/jmcluster/jmcluster/security"

	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/jmcluster/jmcluster/checkpoint"
	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/internal/version"
	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/metrics"
	"github.com/jmcluster/jmcluster/reconcile"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// JobMaster is a running JM replica.
type JobMaster struct {
	cfg    JobMasterConfig
	log    hclog.Logger
	State  *fsm.FSM
	JM     *jobmaster.JobMaster
	Node   *cluster.Node
	Recon  *reconcile.Reconciler
	Gossip *membership.Membership
	// Metrics are this replica's instruments (/metrics).
	Metrics *metrics.JobMaster

	checkpoints *checkpoint.Store // opened from CheckpointDir (closed last)

	grpcLis  net.Listener
	grpc     *grpc.Server
	health   *health.Server
	http     *http.Server
	httpAddr string
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
}

// StartJobMaster binds every listener, starts the servers, then starts Raft (bootstrap or
// join) — the gRPC server must be up first, because bootstrap discovery asks peers over it.
func StartJobMaster(cfg JobMasterConfig) (_ *JobMaster, err error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	log := cfg.Logger
	if _, err := metrics.Process(); err != nil { // before Raft: it emits from its start
		log.Warn("hashicorp metrics not bridged to /metrics", "error", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &JobMaster{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			a.Kill()
		}
	}()
	if a.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("grpc listen %s: %w", cfg.GRPCAddr, err)
	}
	if cfg.Cluster.GRPCAddr == "" {
		cfg.Cluster.GRPCAddr = a.grpcLis.Addr().String()
	}
	cfg.Cluster.Logger = log
	cfg.JobMaster.Logger = log
	cfg.Reconcile.Logger = log
	cfg.Cluster.MaxMessageSize = cfg.MaxMessageSize
	cfg.JobMaster.MaxMessageSize = cfg.MaxMessageSize
	cfg.Cluster.TLS, cfg.JobMaster.TLS = cfg.TLS, cfg.TLS

	// The gauges read deps at a scrape; it is filled in below, before any server starts.
	var deps jmserver.Deps
	a.Metrics = metrics.NewJobMaster(jmserver.MetricsState(&deps))
	cfg.JobMaster.Instruments = a.Metrics
	if cfg.CheckpointDir != "" && cfg.JobMaster.Checkpoints == nil {
		if a.checkpoints, err = checkpoint.Open(cfg.CheckpointDir, checkpoint.Options{}); err != nil {
			return nil, fmt.Errorf("--checkpoint-dir %s: %w", cfg.CheckpointDir, err)
		}
		cfg.JobMaster.Checkpoints = a.checkpoints
	}
	if cfg.JobMaster.ServersApply == nil && cfg.Gossip != nil {
		cfg.JobMaster.ServersApply = a.serversApply // a.Node and a.Gossip are set before any term
	}
	a.State = fsm.New(log)
	a.JM = jobmaster.New(cfg.JobMaster, nil, a.State)
	if cfg.Gossip != nil && cfg.Cluster.SeenEpoch == nil {
		cfg.Cluster.SeenEpoch = a.seenEpoch // a.Gossip is set before the Node starts
	}
	if a.Node, err = cluster.NewNode(cfg.Cluster, a.State, a.JM); err != nil {
		return nil, err
	}
	a.JM.SetRaft(a.Node)
	if cfg.Reconcile.WholeRecords == nil && cfg.Gossip != nil {
		cfg.Reconcile.WholeRecords = func() bool { return !a.serversApply(fsm.LevelReconcileKept) }
	}
	a.Recon = reconcile.New(cfg.Reconcile)
	a.JM.SetReconciler(a.Recon)

	deps = jmserver.Deps{Node: a.Node, State: a.State, JM: a.JM, Metrics: a.Metrics}
	deps.WriteLimit = cfg.WriteLimit
	deps.TLS, deps.Tokens, deps.MetricsAuth = cfg.TLS, cfg.Tokens, cfg.MetricsAuth
	deps.Audit = log.Named("audit")
	if cfg.Gossip != nil {
		g := *cfg.Gossip
		g.Logger = log
		g.Meta = membership.Meta{Role: membership.RoleJobMaster, ID: cfg.Cluster.ID, GRPCAddr: cfg.Cluster.GRPCAddr, Version: version.Version, FSMLevel: fsm.CommandLevel}
		if a.Gossip, err = membership.New(g); err != nil {
			return nil, fmt.Errorf("gossip: %w", err)
		}
		deps.Members = func() []*pb.Member { return PBMembers(a.Gossip.Members()) }
		deps.Gossip = a.Gossip
	}
	a.grpc, a.health = jmserver.NewGRPCServer(deps, cfg.MaxMessageSize)
	lis := a.grpcLis
	a.wg.Add(1)
	go func() { defer a.wg.Done(); _ = a.grpc.Serve(lis) }()
	if cfg.HTTPAddr != "" {
		hl, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return nil, fmt.Errorf("http listen %s: %w", cfg.HTTPAddr, err)
		}
		a.httpAddr = hl.Addr().String()
		a.http = &http.Server{Handler: jmserver.NewHTTPHandler(deps), ReadHeaderTimeout: 5 * time.Second}
		a.wg.Add(1)
		if cfg.TLS != nil {
			// HTTPS with this JM's certificate; a client certificate is optional (browsers
			// authenticate with a token).
			a.http.TLSConfig = cfg.TLS.ServerConfigOptionalClient()
			go func() { defer a.wg.Done(); _ = a.http.ServeTLS(hl, "", "") }()
		} else {
			go func() { defer a.wg.Done(); _ = a.http.Serve(hl) }()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	if err := a.Node.Start(ctx); err != nil {
		return nil, err
	}
	if a.Gossip != nil {
		a.wg.Add(1)
		go func() { defer a.wg.Done(); a.feedRegistry(ctx) }()
		if cfg.CleanupDeadServers > 0 {
			a.wg.Add(1)
			go func() { defer a.wg.Done(); a.cleanupDeadServers(ctx) }()
		}
	}
	log.Info("jobmaster started", "grpc", a.GRPCAddr(), "raft", a.Node.RaftAddr(), "http", a.httpAddr)
	return a, nil
}

// serversApply reports whether every server of the Raft configuration, voter or not (both
// apply the log), gossips (now, or last before it went down) that it applies the commands of
// level: a server gossip does not know, or one of an older build, may not, and a command it
// cannot apply would stop it.
func (a *JobMaster) serversApply(level int) bool {
	peers, err := a.Node.Peers()
	if err != nil || a.Gossip == nil {
		return false
	}
	levels := map[string]int{}
	for _, m := range a.Gossip.Members() {
		if m.MetaErr == nil && m.Meta.Role == membership.RoleJobMaster {
			// Every entry of an id counts: the lowest wins (a node restarted on an older build).
			if l, ok := levels[m.Meta.ID]; !ok || m.Meta.FSMLevel < l {
				levels[m.Meta.ID] = m.Meta.FSMLevel
			}
		}
	}
	for _, p := range peers {
		if l, ok := levels[p.Id]; !ok || l < level {
			return false
		}
	}
	return true
}

// seenEpoch is the highest leader epoch a TaskManager of the gossip pool says it has seen:
// live ones, and dead or left ones gossip still remembers (one that comes back holds its
// epoch).
func (a *JobMaster) seenEpoch() (uint64, string) {
	if a.Gossip == nil {
		return 0, ""
	}
	var (
		epoch uint64
		by    string
	)
	for _, m := range a.Gossip.Members() {
		if m.MetaErr == nil && m.Meta.Role == membership.RoleTaskManager && m.Meta.Epoch > epoch {
			epoch, by = m.Meta.Epoch, "TaskManager "+m.Meta.ID
		}
	}
	return epoch, by
}

// GRPCAddr is the bound gRPC address.
func (a *JobMaster) GRPCAddr() string { return a.grpcLis.Addr().String() }

// HTTPAddr is the bound HTTP address ("" when HTTP is off).
func (a *JobMaster) HTTPAddr() string { return a.httpAddr }

// feedRegistry keeps the leader's TaskManager registry in step with gossip (addresses, slots,
// alive/dead) and publishes this JM's leadership and epoch in its own gossip metadata, where
// TaskManagers look for the leader.
func (a *JobMaster) feedRegistry(ctx context.Context) {
	events, unsubscribe := a.Gossip.Subscribe(256)
	defer unsubscribe()
	apply := func(m membership.Member) {
		if m.MetaErr != nil || m.Meta.Role != membership.RoleTaskManager {
			return
		}
		a.JM.Registry().Upsert(m.Meta.ID, m.Meta.GRPCAddr, m.Meta.DataAddr, m.Meta.Slots, false)
		a.JM.Registry().SetGossipOf(m.Meta.ID, m.Meta.Incarnation, m.State)
	}
	for _, m := range a.Gossip.Members() {
		apply(m)
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			apply(ev.Member)
		case <-tick.C:
			epoch, leader := a.JM.Epoch(), a.JM.Active()
			if lm := a.Gossip.LocalMeta(); epoch > lm.Epoch || lm.Leader != leader {
				_ = a.Gossip.UpdateMeta(func(m *membership.Meta) {
					if epoch > m.Epoch {
						m.Epoch = epoch
					}
					m.Leader = leader
				})
			}
		}
	}
}

// Shutdown stops the replica in the written order: health NOT_SERVING, HTTP, gossip leave,
// leader work (JobMaster), Raft with leadership transfer and stores (cluster.Node.Shutdown),
// then the gRPC server.
func (a *JobMaster) Shutdown() error {
	a.stopOnce.Do(func() {
		// A leader hands leadership over first, while its gossip, gRPC and Raft all still work:
		// the new leader is elected at once (no election timeout) and reconciles with the
		// TaskManagers before this one leaves their gossip view.
		if a.Node != nil && a.Node.IsLeader() {
			if to, err := a.Node.TransferLeadership(""); err != nil {
				a.log.Warn("leadership transfer before shutdown failed; the others elect a leader after their timeout", "error", err)
			} else {
				a.log.Info("leadership handed over before shutdown", "to", orUnknown(to))
			}
		}
		if a.health != nil {
			a.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		}
		if a.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = a.http.Shutdown(ctx)
			cancel()
		}
		if a.Gossip != nil {
			_ = a.Gossip.Leave(time.Second)
			_ = a.Gossip.Shutdown()
		}
		if a.cancel != nil {
			a.cancel()
		}
		if a.JM != nil {
			a.JM.Shutdown()
		}
		if a.Node != nil {
			a.stopErr = a.Node.Shutdown()
		}
		a.stopServers()
		a.closeCheckpoints()
	})
	return a.stopErr
}

// Kill stops the replica as abruptly as one process allows: no gossip leave, no leadership
// transfer, connections dropped.
func (a *JobMaster) Kill() {
	a.stopOnce.Do(func() {
		// Raft and gRPC go silent together, first, as in a crash; the rest is cleanup.
		if a.Node != nil {
			a.Node.CutOff()
		}
		if a.cancel != nil {
			a.cancel()
		}
		a.stopServers()
		if a.Gossip != nil {
			_ = a.Gossip.Shutdown()
		}
		if a.Node != nil {
			_ = a.Node.Kill()
		}
		if a.JM != nil {
			a.JM.Shutdown()
		}
		a.closeCheckpoints()
	})
}

func (a *JobMaster) closeCheckpoints() {
	if a.checkpoints != nil {
		_ = a.checkpoints.Close()
	}
}

func (a *JobMaster) stopServers() {
	if a.grpc != nil {
		a.grpc.Stop()
	} else if a.grpcLis != nil {
		_ = a.grpcLis.Close()
	}
	if a.http != nil {
		_ = a.http.Close()
	}
	a.wg.Wait()
}

// PBMembers converts gossip members for the API.
func PBMembers(ms []membership.Member) []*pb.Member {
	out := make([]*pb.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, &pb.Member{Name: m.Name, Address: m.Addr, Role: string(m.Meta.Role), State: m.State, Meta: map[string]string{
			"id": m.Meta.ID, "grpc": m.Meta.GRPCAddr, "data": m.Meta.DataAddr,
			"slots": strconv.Itoa(int(m.Meta.Slots)), "epoch": strconv.FormatUint(m.Meta.Epoch, 10),
			"leader": strconv.FormatBool(m.Meta.Leader), "version": m.Meta.Version,
		}})
		if m.Meta.Role == membership.RoleJobMaster {
			out[len(out)-1].Meta["fsm_level"] = strconv.Itoa(m.Meta.FSMLevel)
		}
	}
	return out
}

var errNoLeader = errors.New("no leader in gossip metadata")

// TLS is the replica's mutual TLS (nil: plaintext).
func (a *JobMaster) TLS() *security.TLS { return a.cfg.TLS }

// orUnknown names a leader not heard of yet.
func orUnknown(id string) string {
	if id == "" {
		return "(not known yet)"
	}
	return id
}
