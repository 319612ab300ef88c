// Package reconcile is what a new leader does before it accepts normal RPCs (FLINK-5703):
// it marks every live job and execution RECONCILING, collects reports from the TaskManagers,
// merges them into the committed ExecutionGraph (step one: information; step two: states),
// decides each job's status, and commits the reconciled graph through Raft. Nothing is acted
// on before that commit, so a leader that dies midway leaves nothing for the next to undo.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/internal/setting"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Config of the reconciliation. Zero values mean the defaults.
type Config struct {
	// ReportDeadline bounds the wait for TaskManagers that are not dead by gossip but do not
	// answer (default 10s).
	ReportDeadline time.Duration
	// CommitChunk is the most executions per ReconcileJob entry (default 5000).
	CommitChunk int
	// ReportChunk is the executions per report chunk asked of TMs (default 1000).
	ReportChunk int32
	// ReportChunkBytes is the most encoded bytes per report chunk asked of TMs (default
	// transport.ChunkBudget(0): the 4 MiB message limit minus a 256 KiB margin).
	ReportChunkBytes int
	// ReportStreamTimeout bounds one report stream, from the request to its last chunk
	// (default: ReportDeadline). A stream cut by it is asked again within the window.
	ReportStreamTimeout time.Duration
	// MaxReportBytes bounds what one TM's report stream may accumulate (default 256 MiB), and
	// MaxReportExecutions its executions (default 100,000). A report past either is refused
	// (ErrReportTooLarge, naming the bound): the TM counts as not reported.
	MaxReportBytes      int64
	MaxReportExecutions int
	// RetryInterval between attempts to reach a TM within the deadline (default 100ms).
	RetryInterval time.Duration
	// WholeRecords, when set and true, makes the commit write every reconciled execution as a
	// whole record (RECONCILE_JOB), never ranges (RECONCILE_KEPT): a voter may run a build
	// that does not apply RECONCILE_KEPT. Nil: every replica does.
	WholeRecords func() bool
	// WholeReports asks every TM for its whole report, never with an expectation (tests that
	// compare the two answers; a TM answers as expected only when it matches).
	WholeReports bool
	Logger       hclog.Logger
}

// ErrInvalidConfig is the kind of Validate's refusals.
var ErrInvalidConfig = errors.New("invalid reconcile config")

// Validate refuses a negative duration or bound, naming the field (a *setting.Error); zero
// means the default.
func (c Config) Validate() error {
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"ReportDeadline", c.ReportDeadline}, {"ReportStreamTimeout", c.ReportStreamTimeout}, {"RetryInterval", c.RetryInterval}} {
		if err := setting.NonNegative(ErrInvalidConfig, d.field, d.v); err != nil {
			return err
		}
	}
	for _, n := range []struct {
		field string
		v     int64
	}{{"CommitChunk", int64(c.CommitChunk)}, {"ReportChunk", int64(c.ReportChunk)}, {"ReportChunkBytes", int64(c.ReportChunkBytes)},
		{"MaxReportBytes", c.MaxReportBytes}, {"MaxReportExecutions", int64(c.MaxReportExecutions)}} {
		if n.v < 0 {
			return setting.New(ErrInvalidConfig, n.field, n.v, "must not be negative")
		}
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.ReportDeadline <= 0 {
		c.ReportDeadline = 10 * time.Second
	}
	if c.CommitChunk <= 0 {
		c.CommitChunk = 5000
	}
	if c.ReportChunk <= 0 {
		c.ReportChunk = DefaultReportChunk
	}
	if c.ReportChunkBytes <= 0 {
		c.ReportChunkBytes = transport.ChunkBudget(0)
	}
	if c.ReportStreamTimeout <= 0 {
		c.ReportStreamTimeout = c.ReportDeadline
	}
	if c.MaxReportBytes <= 0 {
		c.MaxReportBytes = DefaultMaxReportBytes
	}
	if c.MaxReportExecutions <= 0 {
		c.MaxReportExecutions = DefaultMaxReportExecutions
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = 100 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
}

// Defaults of the report bounds (Config).
const (
	DefaultReportChunk         = 1000
	DefaultMaxReportBytes      = 256 << 20
	DefaultMaxReportExecutions = 100_000
)

// ErrDeposed: a TM has seen a higher epoch than ours; another leader exists.
var ErrDeposed = errors.New("reconcile: a TaskManager has seen a newer leader epoch")

// Reconciler implements jobmaster.Reconciler. It reaches the JobMaster only through the term
// it reconciles for (jobmaster.Term).
type Reconciler struct {
	cfg Config
	log hclog.Logger
	// Observer, when set, is told of each step (the demo prints them; tests watch them).
	Observer func(Step)
}

// Step is one observable step of a reconciliation.
type Step struct {
	Epoch  uint64
	Name   string // "begin", "report", "merged", "committed", "late-report"
	Detail string
	At     time.Time
}

// New returns a Reconciler.
func New(cfg Config) *Reconciler {
	cfg.setDefaults()
	return &Reconciler{cfg: cfg, log: cfg.Logger.Named("reconcile")}
}

func (r *Reconciler) step(epoch uint64, name, format string, args ...any) {
	detail := fmt.Sprintf(format, args...)
	r.log.Info(name, "epoch", epoch, "detail", detail)
	if r.Observer != nil {
		r.Observer(Step{Epoch: epoch, Name: name, Detail: detail, At: time.Now()})
	}
}

// Reconcile runs the protocol for one term. The gate is closed by the caller and opened after
// a nil return; an error makes the node step down.
func (r *Reconciler) Reconcile(ctx context.Context, t jobmaster.Term) error {
	epoch := t.Epoch()
	start := time.Now()
	lostAt, establishedAt := t.Times()
	if _, err := t.Commit(ctx, pb.CommandType_COMMAND_TYPE_BEGIN_RECONCILIATION, &pb.BeginReconciliationCommand{
		Epoch: epoch, Timestamp: start.UnixMilli(), LeaderLostAt: lostAt, EstablishedAt: establishedAt,
	}); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	begun := time.Now()
	// The jobs are read in place, under the state's read lock, never copied: a copy of 100,000
	// executions took about as long as the merge.
	var (
		jobs    int
		holders map[string]*target
	)
	t.WithJobs(func(all []*pb.JobRecord) {
		rec := reconcilingJobs(all)
		jobs, holders = len(rec), holdersOf(rec)
	})
	r.step(epoch, "begin", "%d jobs RECONCILING (begin committed in %s, report targets in %s)", jobs,
		begun.Sub(start).Round(time.Millisecond), time.Since(begun).Round(time.Millisecond))
	if failpoint.Enabled(failpoint.StuckReconciling) && jobs > 0 {
		r.log.Warn("failpoint stuck-reconciling: reconciliation never finishes", "epoch", epoch)
		<-ctx.Done()
		return ctx.Err()
	}

	targets := r.targets(t, holders)
	col := newCollector(r, t)
	reports, err := col.collect(ctx, targets)
	if err != nil {
		return err
	}
	// The record's phase and report times are this leader's clock, written into the command.
	end := &pb.EndReconciliationCommand{Epoch: epoch, Outcome: "completed"}
	end.CollectedAt, end.Reports = col.record()
	// Kept executions go into ranges (RECONCILE_KEPT) when every voter applies that command;
	// otherwise, and for the failpoint that fails every execution, whole records.
	compact := !failpoint.Enabled(failpoint.RestartOnFailover) && (r.cfg.WholeRecords == nil || !r.cfg.WholeRecords())
	var plan *Plan
	t.WithJobs(func(all []*pb.JobRecord) {
		plan = merge(reconcilingJobs(all), reports, time.Now().UnixMilli(), compact)
	})
	plan.Counts.Reports = int64(len(reports))
	if failpoint.Enabled(failpoint.RestartOnFailover) {
		restartAll(plan)
	}
	end.MergedAt = time.Now().UnixMilli()
	r.step(epoch, "merged", "%s", plan.Summary())
	failpoint.Inject(ctx, failpoint.BeforeReconcileCommit)

	for _, jp := range plan.Jobs {
		if err := r.commitJob(ctx, t, jp, plan.At); err != nil {
			return err
		}
	}
	end.JobsCommittedAt = time.Now().UnixMilli()
	end.Timestamp, end.Counts = time.Now().UnixMilli(), plan.Counts
	if _, err := t.Commit(ctx, pb.CommandType_COMMAND_TYPE_END_RECONCILIATION, end); err != nil {
		return fmt.Errorf("end: %w", err)
	}
	r.step(epoch, "committed", "reconciled graph committed in %s (%s)", time.Since(start).Round(time.Millisecond), commitForm(plan, compact))

	// Only now, after the commit, act on what the reports showed; the checkpoint
	// acknowledgements they carried go to the term, which completes or aborts the pending
	// checkpoints once the gate opens.
	t.NoteCheckpointReports(checkpointAcks(reports), sinkCommits(reports))
	r.act(ctx, t, plan)
	go col.handleLate(ctx)
	return nil
}

// commitForm says how the plan was committed: how many whole records and kept ranges, and,
// when every execution went as a whole record, why.
func commitForm(plan *Plan, compact bool) string {
	records, ranges := 0, 0
	for _, jp := range plan.Jobs {
		records, ranges = records+len(jp.Executions), ranges+len(jp.Kept)
	}
	form := fmt.Sprintf("%d whole records, %d kept ranges", records, ranges)
	switch {
	case compact:
	case failpoint.Enabled(failpoint.RestartOnFailover):
		form += "; whole records only: failpoint " + failpoint.RestartOnFailover.Name()
	default:
		form += "; whole records only: a Raft server does not gossip that it applies RECONCILE_KEPT"
	}
	return form
}

// reconcilingJobs returns the jobs BeginReconciliation moved to RECONCILING.
func reconcilingJobs(all []*pb.JobRecord) []*pb.JobRecord {
	var out []*pb.JobRecord
	for _, rec := range all {
		if rec.Status == pb.JobStatus_JOB_STATUS_RECONCILING {
			out = append(out, rec)
		}
	}
	return out
}

// target is a TM to ask for a report.
type target struct {
	id, addr string
	// holds: the TM holds a committed attempt of a reconciling job (its silence fails them).
	holds bool
	// expect: the digest of what the committed graph has on the TM, every RECONCILING
	// execution assigned to it RUNNING as committed (nil for a TM found later: it sends its
	// whole report).
	expect *transport.ReportDigest
	// whole: the TM holds an attempt of a job with a pending checkpoint; it is asked for its
	// whole report, whose executions carry their latest checkpoint acknowledgements (an
	// as-expected answer carries none).
	whole bool
}

// holdersOf: every TM that holds a committed attempt of the jobs, by id, with the digest of
// the report that would keep every RECONCILING execution on it as committed.
func holdersOf(jobs []*pb.JobRecord) map[string]*target {
	byID := map[string]*target{}
	for _, rec := range jobs {
		jobID := rec.GetJobGraph().GetJobId()
		pending := len(rec.GetCheckpoints().GetPending()) > 0
		produces, inputs := map[string]int{}, graph.InputCounts(rec.GetExecutionGraph())
		for _, res := range rec.GetExecutionGraph().GetResults() {
			produces[res.ProducerVertexId]++
		}
		for _, v := range rec.GetExecutionGraph().GetVertices() {
			for _, ev := range v.Subtasks {
				e := ev.GetCurrent()
				if e == nil || e.GetSlot().GetTmId() == "" {
					continue
				}
				id := e.Slot.TmId
				t := byID[id]
				if t == nil {
					t = &target{id: id, addr: e.TmGrpcAddress, expect: &transport.ReportDigest{}}
					byID[id] = t
				}
				t.whole = t.whole || pending
				if e.State == pb.ExecutionState_EXECUTION_STATE_RECONCILING {
					t.holds = true
					t.expect.Add(jobID, ev.VertexId, ev.SubtaskIndex, e.AttemptId, e.Slot.Index, e.StartTimestamp,
						pb.ExecutionState_EXECUTION_STATE_RUNNING, produces[ev.VertexId], true, inputs[ev.VertexId])
				}
			}
		}
	}
	return byID
}

// targets: every TM that holds a committed attempt (byID, from holdersOf), and every TM gossip
// or registration knows.
func (r *Reconciler) targets(port jobmaster.Term, byID map[string]*target) []target {
	for _, tm := range port.TMs() {
		if tm.GRPCAddr == "" {
			continue
		}
		t := byID[tm.ID]
		if t == nil {
			t = &target{id: tm.ID}
			byID[tm.ID] = t
		}
		t.addr = tm.GRPCAddr // the freshest address wins
	}
	out := make([]target, 0, len(byID))
	for _, t := range byID {
		if t.whole {
			t.expect = nil
		}
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// commitJob commits one job's reconciled executions in chunks, and its kept ranges; the last
// chunk carries the job's new status. at is the merge's timestamp.
func (r *Reconciler) commitJob(ctx context.Context, t jobmaster.Term, jp *JobPlan, at int64) error {
	epoch := t.Epoch()
	n := len(jp.Executions)
	chunk := r.cfg.CommitChunk
	command := func(i int) *pb.ReconcileJobCommand {
		end := min(i+chunk, n)
		cmd := &pb.ReconcileJobCommand{
			Epoch: epoch, JobId: jp.JobID, Executions: jp.Executions[i:end], LastChunk: end >= n, Timestamp: time.Now().UnixMilli(),
		}
		if cmd.LastChunk {
			cmd.Status, cmd.Cause = jp.Status, jp.Cause
		}
		return cmd
	}
	// The chunks before the last are independent of each other (each replaces executions of its
	// own) and are proposed together, up to commitInFlight at a time, so that Raft batches them
	// into shared appends and fsyncs instead of a round trip each; the last chunk, which carries
	// the job's status, is committed once all of them are.
	last := 0
	if n > chunk {
		last = (n - 1) / chunk * chunk
	}
	// The kept ranges (RECONCILE_KEPT) are as independent of the chunks and go with them.
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, commitInFlight)
	)
	propose := func(typ pb.CommandType, what string, at int, m proto.Message) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := t.Commit(ctx, typ, m); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("commit job %s %s at %d: %w", jp.JobID, what, at, err)
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < len(jp.Kept); i += chunk {
		propose(pb.CommandType_COMMAND_TYPE_RECONCILE_KEPT, "kept ranges", i, &pb.ReconcileKeptCommand{
			Epoch: epoch, JobId: jp.JobID, Ranges: jp.Kept[i:min(i+chunk, len(jp.Kept))], Timestamp: at,
		})
	}
	for i := 0; i < last; i += chunk {
		propose(pb.CommandType_COMMAND_TYPE_RECONCILE_JOB, "chunk", i, command(i))
	}
	wg.Wait()
	if first != nil {
		return first
	}
	if _, err := t.Commit(ctx, pb.CommandType_COMMAND_TYPE_RECONCILE_JOB, command(last)); err != nil {
		return fmt.Errorf("commit job %s chunk at %d: %w", jp.JobID, last, err)
	}
	return nil
}

// commitInFlight bounds the chunks of one job proposed at once.
const commitInFlight = 4
