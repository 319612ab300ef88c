package taskmanager

import (
	"github.com/jmcluster/jmcluster/security"

	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/jmcluster/jmcluster/checkpoint"
	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TaskManager runs tasks in slots and reports them to the JobMaster leader.
type TaskManager struct {
	cfg Config
	log hclog.Logger
	// ckpt is the checkpoint storage (Config.CheckpointDir), or nil.
	ckpt *checkpoint.Store
	// states writes the tasks' checkpoint states to ckpt in batches (statewriter.go).
	states stateWriter
	// opLog is log named for operators, made once: a per-task Named costs a deployment of
	// hundreds of tasks measurable time.
	opLog hclog.Logger

	grpcLis, dataLis net.Listener
	grpcSrv, dataSrv *grpc.Server
	health           *health.Server

	// dp is the data plane: the partitions, the Exchange streams, the tasks' channel sets.
	dp     dataPlane
	outbox *outbox
	conns  *connPool
	events *eventLog

	// The control side: the slots and admission, leader contact, and fencing.
	table *slotTable
	link  *leaderLink
	fence *fence
	// artifacts fetches and caches the artifacts tasks ask for (artifacts.go).
	artifacts *artifactCache

	// mu is the task lock: the slot table and each task's fields.
	mu              sync.Mutex
	partitionExpiry map[dataplane.PartitionKey]time.Time // partitions of finished attempts and when they expire

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	started   atomic.Bool
	killed    atomic.Bool
	stopping  atomic.Bool
	stopOnce  sync.Once
	serveErrs chan error
}

// New validates cfg and binds both listeners.
func New(cfg Config) (*TaskManager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.WorkDir != "" {
		if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
			return nil, fmt.Errorf("taskmanager %s: work dir: %w", cfg.ID, err)
		}
	}
	var ckpt *checkpoint.Store
	if cfg.CheckpointDir != "" {
		st, err := checkpoint.Open(cfg.CheckpointDir, checkpoint.Options{})
		if err != nil {
			return nil, fmt.Errorf("taskmanager %s: checkpoint storage: %w", cfg.ID, err)
		}
		ckpt = st
	}
	gl, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		if ckpt != nil {
			_ = ckpt.Close()
		}
		return nil, fmt.Errorf("taskmanager %s: listen grpc: %w", cfg.ID, err)
	}
	dl, err := net.Listen("tcp", cfg.DataAddr)
	if err != nil {
		_ = gl.Close()
		return nil, fmt.Errorf("taskmanager %s: listen data: %w", cfg.ID, err)
	}
	if cfg.AdvertiseGRPC == "" {
		cfg.AdvertiseGRPC = gl.Addr().String()
	}
	if cfg.AdvertiseData == "" {
		cfg.AdvertiseData = dl.Addr().String()
	}
	if cfg.Incarnation == "" {
		cfg.Incarnation = newIncarnation()
	}
	ctx, cancel := context.WithCancel(context.Background())
	tm := &TaskManager{
		cfg:             cfg,
		log:             cfg.Logger.Named("taskmanager").With("tm", cfg.ID),
		ckpt:            ckpt,
		grpcLis:         gl,
		dataLis:         dl,
		health:          health.NewServer(),
		conns:           newConnPool(cfg.MaxMessageSize, cfg.TLS),
		events:          newEventLog(cfg.EventLog, cfg.ID),
		partitionExpiry: map[dataplane.PartitionKey]time.Time{},
		ctx:             ctx,
		cancel:          cancel,
		serveErrs:       make(chan error, 2),
	}
	tm.opLog = tm.log.Named("operator")
	tm.states.tm = tm
	tm.dp = dataplane.New(ctx, dataplane.Config{ID: cfg.ID, DataAddr: cfg.AdvertiseData, MaxMessageSize: cfg.MaxMessageSize,
		InputConnectTimeout: cfg.InputConnectTimeout, ExchangeWithoutGroups: cfg.ExchangeWithoutGroups,
		Int64Records: cfg.Int64Records, Logger: tm.log, Dial: tm.conns.peer})
	tm.table = newSlotTable(&tm.mu, cfg.ID, cfg.Slots, ckpt != nil)
	tm.fence = &fence{cfg: cfg, log: tm.log, jms: &jobMasters{cfg: cfg, conns: tm.conns}, conns: tm.conns,
		stop: func(why string) int { return len(tm.table.cancelAll(why)) }}
	tm.link = newLeaderLink(cfg, tm.log, tm.conns, tm.fence, tm.table, tm.events)
	tm.artifacts = newArtifactCache(cfg.ArtifactCacheDir, cfg.ArtifactCacheBytes, tm.artifactSources, tm.conns, tm.log)
	tm.fence.leader, tm.fence.interval = tm.link.leader, tm.link.interval
	tm.outbox = newOutbox(cfg, tm.log, tm.link, tm.events, tm.table.disown)
	tm.link.wakeOutbox = tm.outbox.wake
	var reg grpc.ServiceRegistrar
	tm.grpcSrv, reg = newServer(cfg, tm.health, security.RoleJobMaster, security.RoleTaskManager)
	pb.RegisterTaskManagerServiceServer(reg, &controlService{tm: tm})
	pb.RegisterPeerServiceServer(reg, &peerService{f: tm.fence})
	if cfg.RegisterServices != nil {
		cfg.RegisterServices(reg)
	}
	tm.dataSrv, reg = newServer(cfg, tm.health, security.RoleTaskManager)
	tm.dp.Register(reg)
	transport.MustCover(tm.grpcSrv, false)
	transport.MustCover(tm.dataSrv, false)
	return tm, nil
}

// newServer builds a gRPC server behind the edge (transport.NewServer: the policy interceptor,
// with no guard — every TaskManager method is served where it lands) with health and
// reflection, and the registrar of its services: every message it receives or sends is bounded
// by MaxMessageSize, and a message over it is refused with a status naming the limit and
// --max-message-size. With TLS it admits only certificates of the roles in admit.
func newServer(cfg Config, hs *health.Server, admit ...security.Role) (*grpc.Server, grpc.ServiceRegistrar) {
	var observe []transport.CallObserver
	if cfg.ObserveCall != nil {
		observe = append(observe, cfg.ObserveCall)
	}
	s, reg := transport.NewServer(cfg.MaxMessageSize, "TaskManager", nil, transport.Auth{TLS: cfg.TLS, Admit: admit}, observe...)
	healthpb.RegisterHealthServer(reg, hs)
	reflection.Register(s)
	return s, reg
}

// Start serves both services and starts registration, heartbeats, the grace watchdog, the
// retention reaper and the outbox. ctx only bounds Start itself; Stop or Kill end the TM.
func (tm *TaskManager) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !tm.started.CompareAndSwap(false, true) {
		return nil
	}
	tm.fence.started()
	for _, srv := range []struct {
		s *grpc.Server
		l net.Listener
	}{{tm.grpcSrv, tm.grpcLis}, {tm.dataSrv, tm.dataLis}} {
		tm.wg.Go(func() {
			if err := srv.s.Serve(srv.l); err != nil && !tm.killed.Load() {
				tm.log.Debug("server stopped", "addr", srv.l.Addr().String(), "error", err)
			}
		})
	}
	tm.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	for _, loop := range []func(context.Context){tm.link.loop, tm.fence.graceLoop, tm.fence.poolLoop, tm.reapLoop} {
		tm.wg.Go(func() { loop(tm.ctx) })
	}
	tm.log.Info("started", "grpc", tm.cfg.AdvertiseGRPC, "data", tm.cfg.AdvertiseData, "slots", tm.cfg.Slots)
	return nil
}

// Stop is the graceful process stop: refuse new work, cancel every task (reporting CANCELED),
// give the outbox a bounded time to deliver, stop serving and release everything. Idempotent.
func (tm *TaskManager) Stop() {
	tm.stopOnce.Do(func() {
		tm.stopping.Store(true)
		tm.log.Info("stopping")
		tm.health.Shutdown()
		deadline := time.Now().Add(tm.cfg.ShutdownTimeout)
		for _, t := range tm.table.cancelAll("taskmanager stopping") {
			t.wait(time.Until(deadline))
		}
		tm.outbox.drain(time.Until(deadline))
		tm.cancel()
		tm.outbox.stop()
		tm.dp.ReleaseAll()
		// The gRPC port closes last: a leader takes its refused connections for proof that
		// this process and its tasks are gone (docs/reconciliation.md#dead-is-dead). A task
		// that ignored its cancel past the deadline is cut off first — the data server and
		// the outgoing connections close before the port does.
		stopServer(tm.dataSrv, time.Until(deadline))
		_ = tm.dataLis.Close()
		tm.conns.closeAll()
		stopServer(tm.grpcSrv, time.Until(deadline))
		_ = tm.grpcLis.Close()
		tm.wg.Wait()
		tm.dp.Wait()
		tm.log.Info("stopped")
	})
}

// Kill stops abruptly, as a crash would: listeners and connections close at once and nothing
// more is reported. Tests use it to simulate a dead TM.
func (tm *TaskManager) Kill() {
	tm.stopOnce.Do(func() {
		tm.killed.Store(true)
		tm.stopping.Store(true)
		tm.log.Warn("killed")
		tm.dataSrv.Stop()
		_ = tm.dataLis.Close()
		tm.conns.closeAll()
		tm.cancel()
		tm.outbox.stop()
		for _, t := range tm.table.cancelAll("taskmanager killed") {
			t.wait(time.Second)
		}
		// The gRPC port closes once the tasks are gone, as a crashed process's tasks are
		// when its port closes (a refused connection proves them gone).
		tm.grpcSrv.Stop()
		_ = tm.grpcLis.Close()
		tm.dp.ReleaseAll()
		tm.wg.Wait()
		tm.dp.Wait()
	})
}

func stopServer(s *grpc.Server, d time.Duration) {
	done := make(chan struct{})
	go func() {
		s.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(max(d, 10*time.Millisecond)):
		s.Stop()
		<-done
	}
}

// ID returns the TM id.
func (tm *TaskManager) ID() string { return tm.cfg.ID }

// GRPCAddr returns the advertised TaskManagerService address.
func (tm *TaskManager) GRPCAddr() string { return tm.cfg.AdvertiseGRPC }

// Heartbeats is the number of heartbeats a leader has answered.
func (tm *TaskManager) Heartbeats() int64 { return tm.link.heartbeats.Load() }

// Incarnation is this process's instance id (Config.Incarnation).
func (tm *TaskManager) Incarnation() string { return tm.cfg.Incarnation }

// newIncarnation is 16 random hex characters.
func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DataAddr returns the advertised DataService address.
func (tm *TaskManager) DataAddr() string { return tm.cfg.AdvertiseData }

// Epoch returns the highest leader epoch seen.
func (tm *TaskManager) Epoch() uint64 { return tm.fence.current() }

// Leader returns the gRPC address of the leader the TM currently talks to, or "".
func (tm *TaskManager) Leader() string { return tm.link.leader() }

// OutboxLen returns the number of messages waiting in the outbox.
func (tm *TaskManager) OutboxLen() int { return tm.outbox.len() }

// FreeSlots returns the number of slots without a non-terminal task.
func (tm *TaskManager) FreeSlots() int { return tm.table.free() }

// TaskInfo is a snapshot of one task.
type TaskInfo struct {
	JobID          string
	VertexID       string
	Subtask        int32
	AttemptID      string
	AttemptNumber  int32
	State          pb.ExecutionState
	FailureCause   string
	Slot           int32
	StartTimestamp int64
	// Retained: the task is terminal and kept only for reports.
	Retained bool
}

// Tasks returns a snapshot of every task, retained terminal ones included, sorted by job,
// vertex, subtask and attempt number.
func (tm *TaskManager) Tasks() []TaskInfo { return tm.table.snapshot() }
