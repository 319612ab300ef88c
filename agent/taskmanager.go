package agent

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/jmcluster/jmcluster/internal/version"
	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/metrics"
	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TaskManager is a running TM with its gossip membership.
type TaskManager struct {
	TM     *taskmanager.TaskManager
	Gossip *membership.Membership
	// Metrics are this TaskManager's instruments (/metrics on HTTPAddr).
	Metrics *metrics.TaskManager
	cancel  context.CancelFunc
	http    *http.Server
	httpLis net.Listener

	gossipRef *atomic.Pointer[membership.Membership] // Gossip, for the keyring service
}

// StartTaskManager binds the TM's listeners, joins gossip with the bound addresses in the
// metadata, and starts the TM (registration, heartbeats, outbox). With gossip on, the leader
// is found through the JMs' gossip metadata first, then by asking TM.JobMasters.
func StartTaskManager(cfg TaskManagerConfig) (*TaskManager, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &TaskManager{}
	if _, err := metrics.Process(); err != nil {
		cfg.Logger.Warn("hashicorp metrics not bridged to /metrics", "error", err)
	}
	cfg.TM.Logger = cfg.Logger
	if cfg.Gossip != nil {
		cfg.TM.LeaderResolver = a.leaderFromGossip
		cfg.TM.DiscoverJobMasters = a.jobMastersFromGossip
		// The keyring service is registered before the membership exists (it needs the bound
		// addresses); until then it answers UNAVAILABLE.
		var gossip atomic.Pointer[membership.Membership]
		a.gossipRef = &gossip
		audit := cfg.Logger.Named("audit")
		cfg.TM.RegisterServices = func(reg grpc.ServiceRegistrar) {
			pb.RegisterGossipServiceServer(reg, jmserver.NewGossipService(gossip.Load, func(ctx context.Context, action string, err error, kv ...any) {
				jmserver.Audit(ctx, audit, action, err, kv...)
			}))
		}
	}
	var state tmState
	a.Metrics = metrics.NewTaskManager(&state)
	cfg.TM.ObserveCall = a.Metrics.ServedRPC
	cfg.TM.ObserveAlignment = a.Metrics.Aligned
	tm, err := taskmanager.New(cfg.TM)
	if err != nil {
		return nil, err
	}
	a.TM = tm
	state.TaskManager = tm
	if cfg.HTTPAddr != "" {
		if a.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			tm.Kill()
			return nil, fmt.Errorf("http listen %s: %w", cfg.HTTPAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics.Handler(a.Metrics.Registry()))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		a.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		if sec := cfg.TM.TLS; sec != nil {
			// HTTPS with this TM's certificate, as a JobMaster's HTTP; a client certificate is
			// optional (a scraper).
			a.http.TLSConfig = sec.ServerConfigOptionalClient()
			go func() { _ = a.http.ServeTLS(a.httpLis, "", "") }()
		} else {
			go func() { _ = a.http.Serve(a.httpLis) }()
		}
	}
	if cfg.Gossip != nil {
		g := *cfg.Gossip
		g.Logger = cfg.Logger
		g.Meta = membership.Meta{Role: membership.RoleTaskManager, ID: cfg.TM.ID, GRPCAddr: tm.GRPCAddr(), DataAddr: tm.DataAddr(),
			Slots: int32(cfg.TM.Slots), Incarnation: tm.Incarnation(), Version: version.Version}
		if g.Meta.Slots == 0 {
			g.Meta.Slots = int32(taskmanager.DefaultConfig().Slots)
		}
		if a.Gossip, err = membership.New(g); err != nil {
			tm.Kill()
			return nil, fmt.Errorf("gossip: %w", err)
		}
		a.gossipRef.Store(a.Gossip)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	if err := tm.Start(ctx); err != nil {
		a.Kill()
		return nil, err
	}
	if a.Gossip != nil {
		go a.publishEpoch(ctx, cfg.Gossip.Join, cfg.Logger)
	}
	return a, nil
}

// publishEpoch keeps the highest leader epoch this TM has seen in its gossip metadata: a new
// leader whose committed state holds a lower epoch knows its state was lost and waits for a
// snapshot restore instead of reconciling the running tasks away (cluster.ErrStateBehind).
// While gossip knows no live JobMaster it joins its seeds again every rejoinInterval:
// memberlist stops contacting dead members, so JobMasters that come back (restarted, or
// rebuilt empty after losing their state) would otherwise not see this TM in gossip.
func (a *TaskManager) publishEpoch(ctx context.Context, seeds []string, log hclog.Logger) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var lastJoin time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if e := a.TM.Epoch(); e > a.Gossip.LocalMeta().Epoch {
				_ = a.Gossip.UpdateMeta(func(m *membership.Meta) { m.Epoch = max(m.Epoch, e) })
			}
			if len(seeds) > 0 && len(a.Gossip.JobMasters()) == 0 && time.Since(lastJoin) >= rejoinInterval {
				lastJoin = time.Now()
				if n, err := a.Gossip.Join(seeds); err == nil {
					log.Info("no JobMaster in gossip: joined the seeds again", "reached", n)
				}
			}
		}
	}
}

// rejoinInterval: how often a TM whose gossip knows no live JobMaster joins its seeds again.
const rejoinInterval = 5 * time.Second

func (a *TaskManager) leaderFromGossip(ctx context.Context) (string, error) {
	if a.Gossip == nil {
		return "", errNoLeader
	}
	var best membership.Member
	for _, m := range a.Gossip.JobMasters() {
		if m.Meta.Leader && m.Meta.Epoch >= best.Meta.Epoch {
			best = m
		}
	}
	if best.Meta.GRPCAddr == "" {
		return "", errNoLeader
	}
	return best.Meta.GRPCAddr, nil
}

// jobMastersFromGossip is the gRPC addresses of the JobMasters gossip knows, the ones that
// claim leadership first (highest epoch first), then by id.
func (a *TaskManager) jobMastersFromGossip() []string {
	if a.Gossip == nil {
		return nil
	}
	jms := a.Gossip.JobMasters()
	slices.SortStableFunc(jms, func(x, y membership.Member) int {
		if x.Meta.Leader != y.Meta.Leader {
			if x.Meta.Leader {
				return -1
			}
			return 1
		}
		if x.Meta.Epoch != y.Meta.Epoch {
			return cmp.Compare(y.Meta.Epoch, x.Meta.Epoch)
		}
		return strings.Compare(x.Meta.ID, y.Meta.ID)
	})
	var out []string
	for _, m := range jms {
		if m.Meta.GRPCAddr != "" {
			out = append(out, m.Meta.GRPCAddr)
		}
	}
	return out
}

// tmState is what the TaskManager's gauges read (metrics.TaskManagerState).
type tmState struct{ *taskmanager.TaskManager }

// HTTPAddr is the bound HTTP address ("" when HTTP is off).
func (a *TaskManager) HTTPAddr() string {
	if a.httpLis == nil {
		return ""
	}
	return a.httpLis.Addr().String()
}

func (a *TaskManager) closeHTTP() {
	if a.http != nil {
		_ = a.http.Close()
	}
}

// Shutdown stops the TM gracefully: leave gossip, then stop the TM (tasks cancelled).
func (a *TaskManager) Shutdown() {
	defer a.closeHTTP()
	if a.Gossip != nil {
		_ = a.Gossip.Leave(time.Second)
		_ = a.Gossip.Shutdown()
	}
	a.TM.Stop()
	a.cancel()
}

// Kill stops the TM abruptly: no gossip leave, no reports, listeners closed.
func (a *TaskManager) Kill() {
	defer a.closeHTTP()
	if a.Gossip != nil {
		_ = a.Gossip.Shutdown()
	}
	if a.TM != nil {
		a.TM.Kill()
	}
	if a.cancel != nil {
		a.cancel()
	}
}
