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
	// refusedWith: the last refusal logged per call; refusal: the current refusal;
	// refusalCounts: refusals by call and code (all guarded by mu; refusal.go).
	refusedWith   map[string]string
	refusal       *Refusal
	refusalCounts map[[2]string]int64

	// fenceChecks counts the checks for a live leader made after FenceTimeout without contact.
	fenceChecks atomic.Int64
	// heartbeats counts the heartbeats the leader answered; contactFailures the failed
	// registrations and heartbeats.
	heartbeats, contactFailures atomic.Int64
	// poolChecks counts the pool queries this TM made (the isolation rule); peerQueries the
	// queries of other TMs it answered.
	poolChecks, peerQueries atomic.Int64
	// newLeaderSeen: when a leader with a newer epoch than the TM's was first named (guarded
	// by mu).
	newLeaderSeen struct {
		epoch uint64
		at    time.Time
	}
	// witnessMu serialises asking the JobMasters about an unannounced epoch; witness is the
	// last answer (the highest established epoch named, and when they were last asked).
	witnessMu sync.Mutex
	witness   struct {
		named uint64
		at    time.Time
	}
	cfg Config
	log hclog.Logger
	// ckpt is the checkpoint storage (Config.CheckpointDir), or nil.
	ckpt *checkpoint.Store
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

	mu    sync.Mutex
	epoch uint64
	tasks map[string]*task // by attempt id, terminal ones while retained
	// bySubtask: the same tasks by job, vertex and subtask (addTaskLocked, dropTaskLocked), so
	// that admitting a task does not scan every task retained (a TM that ran a few 1024-task
	// jobs retains thousands).
	bySubtask       map[subtaskKey][]*task
	slots           [][]*task   // the non-terminal occupants of each slot (slot sharing)
	cancelledUnseen *tombstones // attempts cancelled before they were submitted here
	leaderAddr      string
	leaderID        string
	registered      bool
	needResolve     bool
	lastContact     time.Time
	pool            poolState
	hbInterval      time.Duration
	partitionExpiry map[dataplane.PartitionKey]time.Time // partitions of finished attempts and when they expire

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	kick      chan struct{}
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
		tasks:           map[string]*task{},
		bySubtask:       map[subtaskKey][]*task{},
		cancelledUnseen: newTombstones(MaxCancelTombstones),
		slots:           make([][]*task, cfg.Slots),
		hbInterval:      cfg.HeartbeatInterval,
		partitionExpiry: map[dataplane.PartitionKey]time.Time{},
		ctx:             ctx,
		cancel:          cancel,
		kick:            make(chan struct{}, 1),
		serveErrs:       make(chan error, 2),
	}
	tm.opLog = tm.log.Named("operator")
	tm.dp = dataplane.New(ctx, dataplane.Config{ID: cfg.ID, DataAddr: cfg.AdvertiseData, MaxMessageSize: cfg.MaxMessageSize,
		InputConnectTimeout: cfg.InputConnectTimeout, ExchangeWithoutGroups: cfg.ExchangeWithoutGroups, Logger: tm.log, Dial: tm.conns.peer})
	tm.outbox = newOutbox(tm)
	var reg grpc.ServiceRegistrar
	tm.grpcSrv, reg = tm.newServer(security.RoleJobMaster, security.RoleTaskManager)
	pb.RegisterTaskManagerServiceServer(reg, &controlService{tm: tm})
	pb.RegisterPeerServiceServer(reg, &peerService{tm: tm})
	if cfg.RegisterServices != nil {
		cfg.RegisterServices(reg)
	}
	tm.dataSrv, reg = tm.newServer(security.RoleTaskManager)
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
func (tm *TaskManager) newServer(admit ...security.Role) (*grpc.Server, grpc.ServiceRegistrar) {
	var observe []transport.CallObserver
	if tm.cfg.ObserveCall != nil {
		observe = append(observe, tm.cfg.ObserveCall)
	}
	s, reg := transport.NewServer(tm.cfg.MaxMessageSize, "TaskManager", nil, transport.Auth{TLS: tm.cfg.TLS, Admit: admit}, observe...)
	healthpb.RegisterHealthServer(reg, tm.health)
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
	tm.mu.Lock()
	tm.lastContact = time.Now()
	tm.mu.Unlock()
	tm.serve(tm.grpcSrv, tm.grpcLis)
	tm.serve(tm.dataSrv, tm.dataLis)
	tm.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	tm.goLoop(tm.leaderLoop)
	tm.goLoop(tm.graceLoop)
	tm.goLoop(tm.poolLoop)
	tm.goLoop(tm.reapLoop)
	tm.log.Info("started", "grpc", tm.cfg.AdvertiseGRPC, "data", tm.cfg.AdvertiseData, "slots", tm.cfg.Slots)
	return nil
}

func (tm *TaskManager) serve(s *grpc.Server, l net.Listener) {
	tm.wg.Add(1)
	go func() {
		defer tm.wg.Done()
		if err := s.Serve(l); err != nil && !tm.killed.Load() {
			tm.log.Debug("server stopped", "addr", l.Addr().String(), "error", err)
		}
	}()
}

func (tm *TaskManager) goLoop(f func(ctx context.Context)) {
	tm.wg.Add(1)
	go func() {
		defer tm.wg.Done()
		f(tm.ctx)
	}()
}

// Stop is the graceful process stop: refuse new work, cancel every task (reporting CANCELED),
// give the outbox a bounded time to deliver, stop serving and release everything. Idempotent.
func (tm *TaskManager) Stop() {
	tm.stopOnce.Do(func() {
		tm.stopping.Store(true)
		tm.log.Info("stopping")
		tm.health.Shutdown()
		deadline := time.Now().Add(tm.cfg.ShutdownTimeout)
		for _, t := range tm.cancelAll("taskmanager stopping") {
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
		for _, t := range tm.cancelAll("taskmanager killed") {
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
func (tm *TaskManager) Heartbeats() int64 { return tm.heartbeats.Load() }

// Incarnation is this process's instance id (Config.Incarnation).
func (tm *TaskManager) Incarnation() string { return tm.cfg.Incarnation }

// newIncarnation is 16 random hex characters.
func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// protocol is the protocol version this TM registers with.
func (tm *TaskManager) protocol() uint32 {
	if tm.cfg.ProtocolVersion != 0 {
		return tm.cfg.ProtocolVersion
	}
	return ProtocolVersion
}

// DataAddr returns the advertised DataService address.
func (tm *TaskManager) DataAddr() string { return tm.cfg.AdvertiseData }

// Epoch returns the highest leader epoch seen.
func (tm *TaskManager) Epoch() uint64 {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.epoch
}

// Leader returns the gRPC address of the leader the TM currently talks to, or "".
func (tm *TaskManager) Leader() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.leaderAddr
}

// OutboxLen returns the number of messages waiting in the outbox.
func (tm *TaskManager) OutboxLen() int { return tm.outbox.len() }

// Health returns the gRPC health server both servers expose (status "" is the TM).
func (tm *TaskManager) Health() *health.Server { return tm.health }

// FreeSlots returns the number of slots without a non-terminal task.
func (tm *TaskManager) FreeSlots() int {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.freeSlotsLocked()
}

func (tm *TaskManager) freeSlotsLocked() int {
	n := 0
	for _, occupants := range tm.slots {
		if len(occupants) == 0 {
			n++
		}
	}
	return n
}

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
func (tm *TaskManager) Tasks() []TaskInfo {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	out := make([]TaskInfo, 0, len(tm.tasks))
	for _, t := range sortedTasks(tm.tasks) {
		d := t.tdd
		out = append(out, TaskInfo{
			JobID: d.GetJobId(), VertexID: d.GetVertexId(), Subtask: d.GetSubtaskIndex(),
			AttemptID: d.GetAttemptId(), AttemptNumber: d.GetAttemptNumber(),
			State: t.state, FailureCause: t.cause, Slot: d.GetSlotIndex(),
			StartTimestamp: d.GetStartTimestamp(), Retained: isTerminal(t.state),
		})
	}
	return out
}

// wake nudges the leader loop (re-register, re-resolve).
func (tm *TaskManager) wake() {
	select {
	case tm.kick <- struct{}{}:
	default:
	}
}
