package jepsen

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/client"
	"github.com/jmcluster/jmcluster/jepsen-style/history"
	"github.com/jmcluster/jmcluster/jepsen-style/nemesis"
	"github.com/jmcluster/jmcluster/jepsen-style/netns"
	"github.com/jmcluster/jmcluster/jepsen-style/report"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// run holds the moving parts of one run.
type run struct {
	cfg      Config
	scenario Scenario
	dir      string
	topo     *netns.Topology
	cluster  *Cluster
	pool     *client.Pool
	monitor  *client.Monitor
	exec     *nemesis.Executor
	streamID string
	rep      *report.Report
	actions  []nemesis.Action
	stalls   *stallWatch
	// memb and votersPool: the membership change's record and the final phase's pool of the
	// voters after it (cluster_membership.go); nil in other scenarios.
	memb       *membershipState
	votersPool *client.Pool
	pipe       *pipeline // the pipeline workload (pipeline.go); nil when off
}

// Run executes one scenario and writes its report into RunsDir/<runid>/. The network and every
// process are removed before Run returns, also on error or cancellation. The report is returned
// even when a checker failed (then the error wraps ErrInvalid).
func Run(ctx context.Context, cfg Config) (*report.Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sc, _ := LookupScenario(cfg.Scenario)
	if cfg.Duration < sc.MinDuration {
		if cfg.Progress != nil {
			cfg.Progress("scenario %s needs a fault phase of at least %s: running %s instead of %s", sc.Name, sc.MinDuration, sc.MinDuration, cfg.Duration)
		}
		cfg.Duration = sc.MinDuration
	}
	topo, err := netns.NewTopologyWith(cfg.RunID, sc.tms())
	if err != nil {
		return nil, err
	}
	if err := topo.AddSpareJMs(sc.spareJMs()); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, scenario: sc, topo: topo, dir: filepath.Join(cfg.RunsDir, cfg.RunID)}
	if r.dir, err = filepath.Abs(r.dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	p := cfg.Progress
	p("run %s: scenario %s seed %d duration %s -> %s", cfg.RunID, cfg.Scenario, cfg.Seed, cfg.Duration, r.dir)

	if err := topo.Setup(ctx); err != nil {
		return nil, fmt.Errorf("jepsen: network: %w", err)
	}
	defer func() {
		if err := topo.Teardown(context.Background()); err != nil {
			p("cleanup: %v", err)
		}
		p("cleanup: namespaces of %s removed", cfg.RunID)
	}()
	p("network: %d namespaces on %s", len(topo.Namespaces()), netns.Subnet)
	return r.execute(ctx)
}

func (r *run) execute(ctx context.Context) (*report.Report, error) {
	p := r.cfg.Progress
	var err error
	r.cluster, err = NewCluster(r.topo, r.cfg.JMNode, r.dir, ClusterOptions{Failpoints: r.cfg.Failpoints, DataDisk: r.scenario.needsDataDisk(), TLS: r.cfg.TLS, JMFlags: r.scenario.storeFlags()}, r.cfg.ReportDeadline)
	if err != nil {
		return nil, err
	}
	defer r.cluster.Close()
	// Delay and loss are made in user space (netdelay), so every kernel runs every scenario.
	r.exec = &nemesis.Executor{T: r.cluster, Dev: netns.NodeDevice, NetNS: r.topo.NS, Logf: p}
	if err := r.exec.Prepare(ctx, append(append(JMs(), r.topo.TMs()...), ClientNode)); err != nil {
		return nil, err
	}
	if err := r.prepareSpares(ctx); err != nil {
		return nil, err
	}
	defer r.cluster.Stop(5 * time.Second)
	if err := r.cluster.Start(); err != nil {
		return nil, err
	}
	p("cluster: %d JMs and %d TMs started (logs in %s/<node>.log)", len(JMs()), len(r.topo.TMs()), r.dir)
	if r.cfg.TLS {
		p("tls: mutual TLS on every connection, gossip encrypted; CA, certificates and key in %s/tls", r.dir)
	}

	addrs := map[string]string{}
	for _, n := range JMs() {
		addrs[n] = fmt.Sprintf("%s:%d", r.topo.IP(n), PortGRPC)
	}
	sec, err := r.cluster.ClientTLS()
	if err != nil {
		return nil, err
	}
	if r.pool, err = client.NewPool(addrs, netns.Dialer(r.topo.NS(ClientNode)), sec); err != nil {
		return nil, err
	}
	defer r.pool.Close()
	defer r.stopPipeline()
	if err := r.waitReady(ctx); err != nil {
		return nil, err
	}
	return r.workload(ctx)
}

// waitReady waits for a leader and every TM, submits the streaming job and waits for RUNNING.
func (r *run) waitReady(ctx context.Context) error {
	p := r.cfg.Progress
	mon := client.NewMonitor(r.pool, "", 0, nil)
	deadline := time.Now().Add(60 * time.Second)
	for {
		leader := mon.Leader(ctx)
		tms := 0
		if leader != "" {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := r.pool.Client(leader).ClusterStatus(cctx, &pb.ClusterStatusRequest{})
			cancel()
			if err == nil {
				for _, tm := range st.GetTaskManagers() {
					if tm.GetState() == "alive" || tm.GetState() == "registered" {
						tms++
					}
				}
				if tms >= len(r.topo.TMs()) && !st.GetReconciling() {
					p("cluster: leader %s, %d TMs", leader, tms)
					break
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%w: leader %q, %d TMs after 60s (see %s/*.log)", ErrNotReady, leader, tms, r.dir)
		}
		time.Sleep(300 * time.Millisecond)
	}
	r.streamID = fmt.Sprintf("%032x", uint64(r.cfg.Seed)+1)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.SubmitUntil(sctx, r.pool, client.StreamingJob(r.streamID)); err != nil {
		return fmt.Errorf("%w: submit streaming job: %v", ErrNotReady, err)
	}
	for {
		rec, fr := client.ConsistentRead(sctx, r.pool, r.streamID)
		if fr.Status == "JOB_STATUS_RUNNING" {
			p("stream: job %s RUNNING (%d vertices)", r.streamID, len(rec.GetExecutionGraph().GetVertices()))
			return nil
		}
		if sctx.Err() != nil {
			return fmt.Errorf("%w: streaming job not RUNNING after 30s (last %q %s)", ErrNotReady, fr.Status, fr.Err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// workload runs clients, monitor and nemesis, heals, waits quietly, then runs the final phase
// and the checkers.
func (r *run) workload(ctx context.Context) (*report.Report, error) {
	p := r.cfg.Progress
	histFile, err := os.Create(filepath.Join(r.dir, "history.jsonl"))
	if err != nil {
		return nil, err
	}
	defer histFile.Close()
	monFile, err := os.Create(filepath.Join(r.dir, "monitor.jsonl"))
	if err != nil {
		return nil, err
	}
	defer monFile.Close()
	if err := r.startPipeline(ctx); err != nil {
		return nil, err
	}

	schedule := nemesis.Generate(nemesis.ScheduleConfig{Kinds: r.scenario.Kinds, Seed: r.cfg.Seed,
		Duration: r.cfg.Duration, Warmup: r.cfg.Warmup})
	writeJSON(filepath.Join(r.dir, "schedule.json"), schedule)
	p("schedule: %d faults from seed %d", len(schedule), r.cfg.Seed)

	r.rep = &report.Report{RunID: r.cfg.RunID, Scenario: r.cfg.Scenario, Seed: r.cfg.Seed, Failpoints: r.cfg.Failpoints, Start: time.Now()}
	rec := history.NewRecorder(histFile)
	r.monitor = client.NewMonitor(r.pool, r.streamID, 0, monFile)
	r.stalls = r.newStallWatch(rec)
	r.monitor.OnRound = r.stalls.observe
	monCtx, stopMon := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { defer bg.Done(); r.monitor.Run(monCtx) }()
	defer func() { stopMon(); bg.Wait() }()
	defer r.watchMembership(monCtx)()

	gen := client.NewGenerator(client.GeneratorConfig{Processes: r.cfg.Clients, Seed: r.cfg.Seed, JobRate: r.cfg.JobRate}, r.pool, rec)
	genCtx, stopGen := context.WithCancel(ctx)
	var genWG sync.WaitGroup
	genWG.Add(1)
	go func() { defer genWG.Done(); gen.Run(genCtx) }()

	r.nemesis(ctx, schedule, r.rep.Start)
	if err := r.exec.HealAll(context.Background(), append(append(JMs(), r.topo.TMs()...), ClientNode), append(JMs(), r.topo.TMs()...)); err != nil {
		p("heal-all: %v", err)
	}
	r.rep.HealAt = time.Now()
	p("heal-all at %s; quiet for %s", r.rep.HealAt.Format("15:04:05"), r.cfg.Quiet)
	sinkAtHeal := r.sinkFiles()
	r.sleep(ctx, r.cfg.Quiet)
	stopGen()
	genWG.Wait()
	p("clients: %d operations recorded", len(rec.Ops()))
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return r.finish(ctx, rec, gen, sinkAtHeal)
}

// nemesis follows the schedule until the fault phase ends.
func (r *run) nemesis(ctx context.Context, schedule []nemesis.Fault, start time.Time) {
	p := r.cfg.Progress
	for _, f := range schedule {
		if !r.sleep(ctx, time.Until(start.Add(f.At))) {
			return
		}
		view := nemesis.View{JMs: JMs(), TMs: r.topo.TMs(), Client: ClientNode, Leader: r.leader(ctx)}
		view.SourceTMs = r.sourceTMs(ctx, f.Kind)     // cluster_ckpt.go
		view.PipelineTMs = r.pipelineTMs(ctx, f.Kind) // cluster_ckpt.go
		fr := report.FaultRecord{Index: f.Index, Kind: string(f.Kind), Start: time.Now(), Leader: view.Leader}
		a, err := nemesis.Resolve(f, view)
		if err == nil {
			err = r.exec.Apply(ctx, a)
		}
		fr.Nodes, fr.AffectedTMs = a.Nodes(), a.AffectedTMs(JMs(), r.topo.TMs())
		fr.Detail = describe(a)
		if err != nil {
			fr.Error = err.Error()
		}
		r.actions = append(r.actions, a)
		p("fault %d %s start: %s%s", f.Index, f.Kind, fr.Detail, errSuffix(err))
		r.sleep(ctx, time.Until(start.Add(f.End())))
		herr := r.exec.Heal(context.Background(), a)
		fr.End = time.Now()
		if herr != nil && fr.Error == "" {
			fr.Error = "heal: " + herr.Error()
		}
		p("fault %d %s healed%s", f.Index, f.Kind, errSuffix(herr))
		r.rep.Faults = append(r.rep.Faults, fr)
	}
	r.sleep(ctx, time.Until(start.Add(phaseEnd(schedule, r.cfg.Duration, r.cfg.Settle))))
}

// phaseEnd is when the fault phase ends, from its start: Duration, or settle after the last
// fault's end when that is sooner.
func phaseEnd(schedule []nemesis.Fault, duration, settle time.Duration) time.Duration {
	if settle <= 0 || len(schedule) == 0 {
		return duration
	}
	last := time.Duration(0)
	for _, f := range schedule {
		last = max(last, f.End())
	}
	return min(duration, last+settle)
}

// leader asks the JMs who leads, for up to 3s.
func (r *run) leader(ctx context.Context) string {
	deadline := time.Now().Add(3 * time.Second)
	for {
		if l := r.monitor.Leader(ctx); l != "" || time.Now().After(deadline) || ctx.Err() != nil {
			return l
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func (r *run) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func describe(a nemesis.Action) string {
	s := ""
	if len(a.Kill) > 0 {
		s += fmt.Sprintf("kill %v ", a.Kill)
	}
	if len(a.Pause) > 0 {
		s += fmt.Sprintf("pause %v ", a.Pause)
	}
	if len(a.Grudge) > 0 {
		b, _ := json.Marshal(a.Grudge)
		s += "drop " + string(b) + " "
	}
	if len(a.Netem) > 0 {
		b, _ := json.Marshal(a.Netem)
		s += "netem " + string(b) + " "
	}
	for _, n := range sortedKeys(a.Failpoints) {
		s += fmt.Sprintf("failpoints %s: %s ", n, a.Failpoints[n])
	}
	if len(a.FillDisk) > 0 {
		s += fmt.Sprintf("fill the data disk of %v ", a.FillDisk)
	}
	s += describeStore(a)
	if len(a.Throttle) > 0 {
		s += fmt.Sprintf("cpu quota (µs per 100 ms) %v ", a.Throttle)
	}
	if a.Leader != "" {
		s += "(leader " + a.Leader + ")"
	}
	return s
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " ERROR " + err.Error()
}

func writeJSON(path string, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err == nil {
		_ = os.WriteFile(path, b, 0o644)
	}
}

// WriteSummary writes any value (a matrix summary) as indented JSON.
func WriteSummary(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
