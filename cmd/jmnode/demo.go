package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/taskmanager/operators"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The demo runs real processes (this binary) on loopback: three JobMasters and three
// TaskManagers, submits a streaming job, kills the leader with SIGKILL and shows the
// reconciliation step by step.

type proc struct {
	name    string
	args    []string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has been waited for
	grpc    string
	http    string
	workDir string
	logPath string
}

// alive reports whether the process was started and has not exited. It reads the exited
// channel, not cmd.ProcessState, which the waiting goroutine writes.
func (p *proc) alive() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

type demo struct {
	bin     string
	dir     string
	jms     []*proc
	tms     []*proc
	start   time.Time
	verbose bool
}

func runDemo(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	usageFor(fs, "jmnode demo [--keep] [--job FILE]",
		"Runs a local cluster of 3 JobMasters and 3 TaskManagers as separate processes on loopback,\n"+
			"submits a streaming job, kills the leader (SIGKILL) and shows the reconciliation step by step:\n"+
			"a new leader, the job RECONCILING, the TaskManager reports, the commit, RUNNING again, zero\n"+
			"task restarts and a sink output with no gap and no duplicate.")
	keep := fs.Bool("keep", false, "leave the cluster running at the end and print its addresses (Ctrl-C stops it)")
	jobFile := fs.String("job", "", "job spec to run (default: examples/streaming-checksum.json, or a built-in copy)")
	dir := fs.String("dir", "", "directory for data, logs and sink output (default: a new temporary directory)")
	deadline := fs.Duration("report-deadline", 5*time.Second, "the JobMasters' report deadline")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	d := &demo{bin: bin, start: time.Now()}
	if *dir == "" {
		if d.dir, err = os.MkdirTemp("", "jmcluster-demo-"); err != nil {
			return err
		}
	} else {
		d.dir = *dir
		if err := os.MkdirAll(d.dir, 0o755); err != nil {
			return err
		}
	}
	defer func() {
		if !*keep {
			d.stopAll()
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := d.run(ctx, *jobFile, *deadline); err != nil {
		d.say("FAILED: %v", err)
		d.say("logs are in %s", d.dir)
		return err
	}
	if *keep {
		d.say("cluster left running (Ctrl-C stops it):")
		for _, p := range append(append([]*proc{}, d.jms...), d.tms...) {
			if p.cmd != nil {
				d.say("  %-4s pid %-7d grpc %s  %s  log %s", p.name, p.cmd.Process.Pid, p.grpc, p.http, p.logPath)
			}
		}
		d.say("try: JMNODE_ADDR=%s ./bin/jmnode status", d.liveJM().grpc)
		<-ctx.Done()
		d.stopAll()
		return nil
	}
	_ = os.RemoveAll(d.dir)
	return nil
}

func (d *demo) say(format string, args ...any) {
	fmt.Printf("[%6.2fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func freePorts(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []string
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

func (d *demo) spawn(p *proc) error {
	f, err := os.Create(p.logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(d.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	p.cmd = cmd
	exited := make(chan struct{})
	p.exited = exited
	go func() { _ = cmd.Wait(); f.Close(); close(exited) }()
	return nil
}

func (d *demo) stopAll() {
	for _, p := range append(append([]*proc{}, d.tms...), d.jms...) {
		if p.alive() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range append(append([]*proc{}, d.tms...), d.jms...) {
		for p.alive() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if p.alive() {
			_ = p.cmd.Process.Kill()
		}
	}
}

func (d *demo) liveJM() *proc {
	for _, p := range d.jms {
		if p.alive() {
			return p
		}
	}
	return d.jms[0]
}

func (d *demo) run(ctx context.Context, jobFile string, reportDeadline time.Duration) error {
	d.say("jmcluster demo: 3 JobMasters + 3 TaskManagers on loopback; working directory %s", d.dir)
	ports, err := freePorts(3*4 + 3*3)
	if err != nil {
		return err
	}
	next := func() string { p := ports[0]; ports = ports[1:]; return p }
	var joins, gossips []string
	for i := 0; i < 3; i++ {
		p := &proc{name: fmt.Sprintf("jm%d", i+1)}
		raft, grpc, http, gossip := next(), next(), next(), next()
		p.grpc, p.http = grpc, "http://"+http
		joins, gossips = append(joins, grpc), append(gossips, gossip)
		p.args = []string{"jobmaster", "--id", p.name, "--data-dir", filepath.Join(d.dir, p.name),
			"--raft-addr", raft, "--grpc-addr", grpc, "--http-addr", http, "--gossip-addr", gossip,
			"--gossip-profile", "local", "--bootstrap-expect", "3", "--fast-raft",
			"--report-deadline", reportDeadline.String(), "--heartbeat-timeout", "5s"}
		p.logPath = filepath.Join(d.dir, p.name+".log")
		d.jms = append(d.jms, p)
	}
	for _, p := range d.jms {
		p.args = append(p.args, "--join", strings.Join(joins, ","), "--gossip-join", strings.Join(gossips, ","))
		if err := d.spawn(p); err != nil {
			return err
		}
	}
	d.say("started jm1, jm2, jm3 (Raft bootstrap-expect 3, gossip, fast Raft timings)")
	c, err := dial(strings.Join(joins, ","), 0)
	if err != nil {
		return err
	}
	_ = c
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		return err
	}
	d.say("leader elected: %s at epoch %d", leader.LeaderId, leader.Epoch)

	for i := 0; i < 3; i++ {
		p := &proc{name: fmt.Sprintf("tm%d", i+1)}
		grpc, data, gossip := next(), next(), next()
		p.grpc, p.workDir = grpc, filepath.Join(d.dir, p.name)
		p.logPath = filepath.Join(d.dir, p.name+".log")
		p.args = []string{"taskmanager", "--id", p.name, "--slots", "4", "--grpc-addr", grpc, "--data-addr", data,
			"--gossip-addr", gossip, "--gossip-join", strings.Join(gossips, ","), "--gossip-profile", "local",
			"--jm", strings.Join(joins, ","), "--work-dir", p.workDir, "--event-log", filepath.Join(d.dir, p.name+"-events.jsonl"),
			"--heartbeat-interval", "500ms", "--fence-timeout", "2s"}
		d.tms = append(d.tms, p)
		if err := d.spawn(p); err != nil {
			return err
		}
	}
	d.say("started tm1, tm2, tm3 (4 slots each)")
	if err := d.waitFor(ctx, 30*time.Second, "3 TaskManagers registered", func(cs *pb.ClusterStatusResponse) bool {
		n := 0
		for _, tm := range cs.TaskManagers {
			if tm.Slots > 0 && tm.State != "dead" && tm.State != "lost" {
				n++
			}
		}
		return n == 3
	}); err != nil {
		return err
	}
	d.say("3 TaskManagers registered with the leader")

	jg, err := d.loadJob(jobFile)
	if err != nil {
		return err
	}
	jg.JobId = newJobID()
	lc := d.client(leader.LeaderGrpcAddress)
	if err := lc.call(15*time.Second, func(ctx context.Context) error {
		_, err := lc.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
		return err
	}); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	d.say("submitted streaming job %q (%s): %s", jg.Name, jg.JobId, describeJob(jg))
	before, err := d.waitJob(ctx, jg.JobId, 30*time.Second, func(rec *pb.JobRecord) bool {
		return rec.Status == pb.JobStatus_JOB_STATUS_RUNNING && allRunning(rec)
	})
	if err != nil {
		return err
	}
	d.say("job RUNNING, every task RUNNING:")
	printJob(os.Stdout, before)
	if err := d.waitSink(ctx, jg.JobId, 1000); err != nil {
		return err
	}
	s0 := d.sinkTotals(jg.JobId)
	d.say("records are flowing: the checksum sinks have seen %d records (gaps %d, duplicates %d)", s0.count, s0.gaps, s0.dups)

	// Kill the leader.
	var old *proc
	for _, p := range d.jms {
		if p.name == leader.LeaderId {
			old = p
		}
	}
	if old == nil {
		return fmt.Errorf("leader %s is not one of the demo's JobMasters", leader.LeaderId)
	}
	killAt := time.Now()
	_ = old.cmd.Process.Kill()
	d.say("KILLED the leader %s (SIGKILL, pid %d)", old.name, old.cmd.Process.Pid)
	for old.alive() {
		time.Sleep(10 * time.Millisecond)
	}

	if err := d.watchFailover(ctx, jg.JobId, old.name, leader.Epoch, killAt); err != nil {
		return err
	}
	after, err := d.waitJob(ctx, jg.JobId, 60*time.Second, func(rec *pb.JobRecord) bool {
		return rec.Status == pb.JobStatus_JOB_STATUS_RUNNING && allRunning(rec)
	})
	if err != nil {
		return err
	}
	restarted := compareAttempts(before, after)
	if len(restarted) == 0 {
		d.say("every execution kept its attempt id and number: 0 tasks restarted")
	} else {
		d.say("%d tasks restarted: %s", len(restarted), strings.Join(restarted, ", "))
	}
	printJob(os.Stdout, after)
	s1 := d.sinkTotals(jg.JobId)
	if err := d.waitSink(ctx, jg.JobId, s1.count+1000); err != nil {
		return err
	}
	s2 := d.sinkTotals(jg.JobId)
	d.say("sink output continues: %d -> %d records; gaps %d, duplicates %d", s1.count, s2.count, s2.gaps, s2.dups)
	if s2.gaps != 0 || s2.dups != 0 || len(restarted) != 0 {
		return errors.New("the failover was not seamless (see above)")
	}

	// Bring the old leader back: it rejoins as a follower from its data directory.
	if err := d.spawn(old); err != nil {
		return err
	}
	d.say("restarted %s from its data directory", old.name)
	if err := d.waitFor(ctx, 30*time.Second, old.name+" back as a follower", func(cs *pb.ClusterStatusResponse) bool {
		for _, p := range cs.Peers {
			if p.Id == old.name && !p.Leader {
				return true
			}
		}
		return false
	}); err != nil {
		return err
	}
	oc := d.client(old.grpc)
	if err := oc.call(20*time.Second, func(ctx context.Context) error {
		r, err := oc.client().GetJob(ctx, &pb.GetJobRequest{JobId: jg.JobId})
		if err == nil && r.Job.Status != pb.JobStatus_JOB_STATUS_RUNNING {
			err = fmt.Errorf("job is %s on %s", graph.JobStatusName(r.Job.Status), old.name)
		}
		return err
	}); err != nil {
		return err
	}
	d.say("%s caught up: it serves the job as RUNNING", old.name)
	d.say("done in %s", time.Since(d.start).Round(10*time.Millisecond))
	return nil
}

func (d *demo) client(addr string) *conn {
	c, _ := dial(addr, 0)
	return c
}

func (d *demo) status(addr string) (*pb.ClusterStatusResponse, error) {
	c := d.client(addr)
	defer c.cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.client().ClusterStatus(ctx, &pb.ClusterStatusRequest{})
}

// waitFor polls the live JMs' cluster status until cond holds on one of them.
func (d *demo) waitFor(ctx context.Context, limit time.Duration, what string, cond func(*pb.ClusterStatusResponse) bool) error {
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, p := range d.jms {
			if !p.alive() {
				continue
			}
			cs, err := d.status(p.grpc)
			if err != nil {
				last = err.Error()
				continue
			}
			if cond(cs) {
				return nil
			}
			last = fmt.Sprintf("%s sees leader %q epoch %d reconciling %v", p.name, cs.LeaderId, cs.Epoch, cs.Reconciling)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("timed out waiting for %s (last seen: %s)", what, last)
}

func (d *demo) waitLeader(ctx context.Context, not string, limit time.Duration) (*pb.ClusterStatusResponse, error) {
	var got *pb.ClusterStatusResponse
	err := d.waitFor(ctx, limit, "an established leader", func(cs *pb.ClusterStatusResponse) bool {
		if cs.LeaderGrpcAddress != "" && cs.LeaderId != not && !cs.Reconciling {
			got = cs
			return true
		}
		return false
	})
	return got, err
}

func (d *demo) getJob(id string) (*pb.JobRecord, string, error) {
	var lastErr error
	for _, p := range d.jms {
		if !p.alive() {
			continue
		}
		c := d.client(p.grpc)
		rec, err := readJob(c, time.Second, id, false)
		c.cc.Close()
		if err == nil {
			return rec, p.name, nil
		}
		lastErr = err
	}
	return nil, "", lastErr
}

func (d *demo) waitJob(ctx context.Context, id string, limit time.Duration, cond func(*pb.JobRecord) bool) (*pb.JobRecord, error) {
	deadline := time.Now().Add(limit)
	last := "nothing"
	for time.Now().Before(deadline) && ctx.Err() == nil {
		rec, _, err := d.getJob(id)
		if err == nil {
			if cond(rec) {
				return rec, nil
			}
			last = fmt.Sprintf("%s, %d/%d running", graph.JobStatusName(rec.Status), pbSummary(rec).running, pbSummary(rec).total)
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("timed out waiting for job %s (last seen: %s)", id, last)
}

// watchFailover prints each step of the failover as the surviving JMs show it.
func (d *demo) watchFailover(ctx context.Context, jobID, oldLeader string, oldEpoch uint64, killAt time.Time) error {
	since := func() string { return time.Since(killAt).Round(time.Millisecond).String() }
	deadline := time.Now().Add(60 * time.Second)
	seenLeader, seenReconciling, seenJobRec := false, false, false
	var newLeader *proc
	printed := 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if newLeader != nil {
			printed = d.printReconcileSteps(newLeader, oldEpoch, printed, killAt)
		}
		for _, p := range d.jms {
			if !p.alive() {
				continue
			}
			cs, err := d.status(p.grpc)
			if err != nil {
				continue
			}
			if !seenLeader && cs.LeaderId != "" && cs.LeaderId != oldLeader && cs.Epoch > oldEpoch {
				seenLeader = true
				for _, q := range d.jms {
					if q.name == cs.LeaderId {
						newLeader = q
					}
				}
				d.say("+%s new leader %s, epoch %d -> %d (EstablishLeadership committed; RPC gate closed)", since(), cs.LeaderId, oldEpoch, cs.Epoch)
			}
			if seenLeader && cs.Reconciling && !seenReconciling {
				seenReconciling = true
				d.say("+%s leader is RECONCILING: TaskManager RPCs other than reports are refused with RECONCILING", since())
			}
			if !seenJobRec {
				if rec, _, err := d.getJob(jobID); err == nil && rec.Status == pb.JobStatus_JOB_STATUS_RECONCILING {
					seenJobRec = true
					d.say("+%s job %s is RECONCILING, its %d executions RECONCILING", since(), jobID[:8], pbSummary(rec).total)
				}
			}
			for _, r := range cs.Reconciliations {
				if r.Epoch > oldEpoch && r.Outcome == "completed" {
					if newLeader != nil {
						d.printReconcileSteps(newLeader, oldEpoch, printed, killAt)
					}
					if rec, _, err := d.getJob(jobID); err == nil {
						var steps []string
						for _, h := range rec.History {
							if at := time.UnixMilli(h.Timestamp); !at.Before(killAt.Add(-time.Second)) {
								steps = append(steps, fmt.Sprintf("%s at +%s", graph.JobStatusName(h.Status), at.Sub(killAt).Round(time.Millisecond)))
							}
						}
						d.say("+%s job status history since the kill: %s", since(), strings.Join(steps, " -> "))
					}
					d.say("+%s reconciliation committed: %d TaskManager reports, %s", since(), r.GetCounts().GetReports(), recCounts(r.Counts))
					d.say("+%s RPC gate open; took %s from the leader's election", since(), recDuration(r))
					return nil
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("timed out waiting for the reconciliation to complete")
}

func allRunning(rec *pb.JobRecord) bool {
	s := pbSummary(rec)
	return s.total > 0 && s.running == s.total
}

// compareAttempts lists executions whose attempt changed between two views of a job.
func compareAttempts(before, after *pb.JobRecord) []string {
	ids := map[string]string{}
	for _, v := range before.ExecutionGraph.Vertices {
		for _, ev := range v.Subtasks {
			ids[fmt.Sprintf("%s[%d]", ev.VertexId, ev.SubtaskIndex)] = fmt.Sprintf("%s#%d", ev.GetCurrent().GetAttemptId(), ev.GetCurrent().GetAttemptNumber())
		}
	}
	var changed []string
	for _, v := range after.ExecutionGraph.Vertices {
		for _, ev := range v.Subtasks {
			k := fmt.Sprintf("%s[%d]", ev.VertexId, ev.SubtaskIndex)
			if ids[k] != fmt.Sprintf("%s#%d", ev.GetCurrent().GetAttemptId(), ev.GetCurrent().GetAttemptNumber()) {
				changed = append(changed, k)
			}
		}
	}
	sort.Strings(changed)
	return changed
}

type sinkTotals struct{ count, gaps, dups int64 }

func (d *demo) sinkTotals(jobID string) sinkTotals {
	var t sinkTotals
	for _, p := range d.tms {
		files, _ := filepath.Glob(filepath.Join(p.workDir, "checksum-"+jobID+"-*.json"))
		for _, f := range files {
			c, err := operators.ReadChecksum(f)
			if err != nil {
				continue
			}
			t.count += c.Count
			for _, o := range c.Origins {
				t.gaps += o.Gaps
				t.dups += o.Duplicates
			}
		}
	}
	return t
}

func (d *demo) waitSink(ctx context.Context, jobID string, atLeast int64) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if d.sinkTotals(jobID).count >= atLeast {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the checksum sinks did not reach %d records (have %d)", atLeast, d.sinkTotals(jobID).count)
}

func (d *demo) loadJob(path string) (*pb.JobGraph, error) {
	if path != "" {
		return LoadJobFile(path)
	}
	if jg, err := LoadJobFile("examples/streaming-checksum.json"); err == nil {
		return jg, nil
	}
	f := filepath.Join(d.dir, "streaming-checksum.json")
	if err := os.WriteFile(f, []byte(builtinJob), 0o644); err != nil {
		return nil, err
	}
	return LoadJobFile(f)
}

func describeJob(jg *pb.JobGraph) string {
	var parts []string
	for _, v := range jg.Vertices {
		parts = append(parts, fmt.Sprintf("%s x%d", v.Id, v.Parallelism))
	}
	return strings.Join(parts, " -> ")
}

const builtinJob = `{
  "name": "streaming-checksum",
  "type": "JOB_TYPE_STREAMING",
  "vertices": [
    {"id": "source", "parallelism": 3, "operator": {"sequence_source": {"rate_per_second": 200, "keys": "8"}}},
    {"id": "map", "parallelism": 3, "operator": {"map": {"multiply": "2", "add": "1"}}},
    {"id": "sink", "parallelism": 3, "operator": {"checksum_sink": {"path": "checksum-{job}-{subtask}.json", "flush_interval_ms": "100"}}}
  ],
  "edges": [
    {"source": "source", "target": "map", "distribution": "DISTRIBUTION_FORWARD", "result_type": "RESULT_TYPE_PIPELINED"},
    {"source": "map", "target": "sink", "distribution": "DISTRIBUTION_FORWARD", "result_type": "RESULT_TYPE_PIPELINED"}
  ],
  "restart_strategy": {"kind": "RESTART_KIND_FIXED_DELAY", "attempts": 3, "delay_ms": "500"}
}`

// printReconcileSteps prints the reconciliation steps the new leader logged (one line per step:
// begin, each TM's report, merged, committed) after the first `done` ones, and returns how many
// it has printed.
func (d *demo) printReconcileSteps(p *proc, oldEpoch uint64, done int, killAt time.Time) int {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return done
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		_, rest, ok := strings.Cut(line, ".reconcile: ")
		if !ok {
			continue
		}
		step, detail, _ := strings.Cut(rest, ": ")
		epochField, text, _ := strings.Cut(detail, " detail=")
		var epoch uint64
		if _, err := fmt.Sscanf(epochField, "epoch=%d", &epoch); err != nil || epoch <= oldEpoch {
			continue
		}
		n++
		if n <= done {
			continue
		}
		at := "?"
		if ts, err := time.Parse("2006-01-02T15:04:05.000Z0700", strings.Fields(line)[0]); err == nil {
			at = ts.Sub(killAt).Round(time.Millisecond).String()
		}
		d.say("+%s   reconcile %-9s %s", at, step, strings.Trim(text, `"`))
	}
	return max(n, done)
}
