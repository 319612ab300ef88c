package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jmcluster/jmcluster/examples"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/pipelinecheck"
	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// demo-pipeline runs a real pipeline end to end (docs/connectors.md, "A pipeline to show it"):
// a NATS server and a PostgreSQL server of its own, the cluster as processes, click events
// published to a JetStream stream, the job JetStream -> key by user -> one-minute tumbling
// window -> PostgreSQL (or -> JetStream), a TaskManager killed and the leader killed on the
// way, and at the end the sink's totals next to what was published.

type pipelineDemo struct {
	*procs
	start   time.Time
	sink    string // "postgres" or "nats"
	plan    clickPlan
	nats    *natsProc
	pg      *pgProc
	secrets string
}

func runDemoPipeline(args []string) error {
	fs := flag.NewFlagSet("demo-pipeline", flag.ContinueOnError)
	usageFor(fs, "jmnode demo-pipeline [--sink postgres|nats] [flags]",
		"Starts a NATS server with JetStream, a PostgreSQL server and a cluster of 3 JobMasters and\n"+
			"3 TaskManagers as processes on loopback; publishes click events to the stream CLICKS; runs\n"+
			"examples/clicks-to-postgres.json (or clicks-to-nats.json): JetStream -> key by user -> one-minute\n"+
			"tumbling window -> the table minute_clicks (or the stream TOTALS), checkpointed; kills a\n"+
			"TaskManager and the leader on the way; and compares the sink's rows with the totals of what\n"+
			"was published: equal, no duplicate row. Needs nats-server (`make demo-pipeline` builds it) and\n"+
			"PostgreSQL's programs (initdb, postgres).")
	sink := fs.String("sink", "postgres", "where the window results go: postgres (the table minute_clicks) or nats (the stream TOTALS)")
	events := fs.Int("events", 30000, "click events to publish")
	users := fs.Int("users", 40, "distinct users")
	minutes := fs.Int("minutes", 10, "minutes of event time the clicks span")
	rate := fs.Int("rate", 3000, "clicks published per second")
	natsBin := fs.String("nats-server", "", "the nats-server program (default: nats-server beside jmnode, else on PATH)")
	dir := fs.String("dir", "", "directory for the servers' data, the cluster's and the logs (default: a new temporary directory, removed on success)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *sink != "postgres" && *sink != "nats":
		return fmt.Errorf("--sink %q: want postgres or nats", *sink)
	case *events < 100 || *events > 10_000_000:
		return fmt.Errorf("--events %d: want 100 to 10,000,000", *events)
	case *users < 1 || *users > 100_000:
		return fmt.Errorf("--users %d: want 1 to 100,000", *users)
	case *minutes < 2 || *minutes > 24*60:
		return fmt.Errorf("--minutes %d: want 2 to 1440", *minutes)
	case *rate < 1:
		return fmt.Errorf("--rate %d: want 1 or more", *rate)
	}
	natsPath, err := findNatsServer(*natsBin)
	if err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	work := *dir
	if work == "" {
		if work, err = os.MkdirTemp("", "jmcluster-pipeline-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	secrets := filepath.Join(work, "secrets")
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		return err
	}
	ckpt := filepath.Join(work, "checkpoints")
	p, err := newProcs(bin, filepath.Join(work, "cluster"), proccluster.LocalOptions{Slots: 4,
		JMFlags: []string{"--gossip-profile", "local", "--fast-raft", "--report-deadline", "5s", "--heartbeat-timeout", "5s",
			"--tm-heartbeat-interval", "500ms", "--checkpoint-dir", ckpt},
		TMFlags: []string{"--gossip-profile", "local", "--heartbeat-interval", "500ms", "--fence-timeout", "2s",
			"--checkpoint-dir", ckpt, "--secrets-dir", secrets}})
	if err != nil {
		return err
	}
	d := &pipelineDemo{procs: p, start: time.Now(), sink: *sink, secrets: secrets,
		plan: planClicks(38, *events, *users, *minutes)}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = d.run(ctx, work, natsPath, *rate)
	d.Stop(5 * time.Second)
	if d.nats != nil {
		d.nats.stop()
	}
	if d.pg != nil {
		d.pg.stop()
	}
	if err != nil {
		d.say("FAILED: %v", err)
		d.say("logs are in %s (nats.log, postgres.log, cluster/*.log)", work)
		return err
	}
	if *dir == "" {
		_ = os.RemoveAll(work)
	}
	return nil
}

func (d *pipelineDemo) say(format string, args ...any) {
	fmt.Printf("[%6.2fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func (d *pipelineDemo) run(ctx context.Context, work, natsPath string, rate int) error {
	n := len(d.plan.clicks)
	d.say("jmcluster pipeline demo: NATS JetStream -> key by user -> 1-minute tumbling window -> %s; working directory %s", d.sinkName(), work)
	var err error
	if d.nats, err = startNats(ctx, natsPath, work); err != nil {
		return err
	}
	if err := d.nats.createStream(ctx, "CLICKS", "clicks.>"); err != nil {
		return fmt.Errorf("create stream CLICKS: %w", err)
	}
	d.say("started nats-server at %s (JetStream, users clicks and demo); stream CLICKS over clicks.>", d.nats.url)
	if err := writeSecret(d.secrets, "nats-clicks", d.nats.credential()); err != nil {
		return err
	}
	jobFile := examples.ClicksToNats
	if d.sink == "postgres" {
		jobFile = examples.ClicksToPostgres
		if d.pg, err = startPostgres(ctx, work); err != nil {
			return err
		}
		if err := writeSecret(d.secrets, "pg-clicks", []byte(d.pg.password+"\n")); err != nil {
			return err
		}
		d.say("started PostgreSQL at 127.0.0.1:%d (max_prepared_transactions %d); table minute_clicks of user clicks, no unique key: a duplicate would be a second row", d.pg.port(), pgMaxPrepared)
	} else {
		if err := d.nats.createStream(ctx, "TOTALS", "totals.>"); err != nil {
			return fmt.Errorf("create stream TOTALS: %w", err)
		}
		d.say("stream TOTALS over totals.> (duplicate window 10m)")
	}
	names, _ := os.ReadDir(d.secrets)
	var creds []string
	for _, e := range names {
		creds = append(creds, e.Name())
	}
	d.say("credentials %s in %s (mode 0700), read by the TaskManagers (--secrets-dir), never in the job", strings.Join(creds, " and "), d.secrets)

	for _, p := range d.JMs {
		if err := p.Start(); err != nil {
			return err
		}
	}
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		return err
	}
	for _, p := range d.TMs {
		if err := p.Start(); err != nil {
			return err
		}
	}
	if err := d.waitTMs(ctx, 30*time.Second, 3, 0); err != nil {
		return err
	}
	d.say("cluster up: jm1-jm3 (leader %s), tm1-tm3 with 4 slots each", leader.LeaderId)

	jg, err := d.job(jobFile, n)
	if err != nil {
		return err
	}
	if err := d.submit(leader.LeaderGrpcAddress, jg); err != nil {
		return err
	}
	d.say("submitted %s (%s): %s, checkpoints every %d ms, the source ending at stream sequence %d",
		jobFile, jg.JobId, describeJob(jg), jg.GetCheckpointConfig().GetIntervalMs(), n)
	if err := d.waitStarted(ctx, jg.JobId); err != nil {
		return err
	}

	var published atomic.Int64
	pubDone := make(chan error, 1)
	go func() { pubDone <- publishClicks(ctx, d.nats.js, d.plan, rate, &published) }()
	clicks, amount := pipelinecheck.Sums(d.plan.totals)
	d.say("publishing %d clicks of %d users over %d minutes of event time at %d/s (%d windows, %d clicks, amount %d)",
		n, len(d.users()), d.minutes(), rate, len(d.plan.totals), clicks, amount)

	// A TaskManager killed once output is committed, the leader killed later.
	if err := d.waitOutput(ctx, &published, pubDone, n/3); err != nil {
		return err
	}
	if err := d.killSinkTM(ctx, jg); err != nil {
		return err
	}
	if err := d.waitPublished(ctx, &published, pubDone, 2*n/3); err != nil {
		return err
	}
	if err := d.killLeader(ctx, jg.JobId); err != nil {
		return err
	}
	select {
	case err := <-pubDone:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	d.say("published all %d clicks (stream sequences 1 to %d)", n, n)
	rec, err := d.waitJob(ctx, jg.JobId, 3*time.Minute, func(r *pb.JobRecord) bool {
		return graph.IsGloballyTerminal(r.Status)
	})
	if err != nil {
		return err
	}
	if rec.Status != pb.JobStatus_JOB_STATUS_FINISHED {
		return fmt.Errorf("job ended %s: %s", graph.JobStatusName(rec.Status), rec.GetFailureCause())
	}
	d.say("job FINISHED after %d restarts (the source read up to its end; the sinks committed everything)", rec.GetRestarts())
	if err := d.check(ctx, jg.JobId); err != nil {
		return err
	}
	if err := d.checkNoSecretLeaks(ctx, work, jg.JobId); err != nil {
		return err
	}
	d.say("done in %s", time.Since(d.start).Round(10*time.Millisecond))
	return nil
}

func (d *pipelineDemo) sinkName() string {
	if d.sink == "postgres" {
		return "PostgreSQL (minute_clicks)"
	}
	return "JetStream (TOTALS)"
}

func (d *pipelineDemo) users() map[string]bool {
	u := map[string]bool{}
	for k := range d.plan.totals {
		u[k.User] = true
	}
	return u
}

func (d *pipelineDemo) minutes() int {
	if len(d.plan.clicks) == 0 {
		return 0
	}
	last := d.plan.clicks[len(d.plan.clicks)-1].TS
	return int((last-clickStart)/60000) + 1
}

// job is the example spec with the demo's servers and the source's end.
func (d *pipelineDemo) job(file string, n int) (*pb.JobGraph, error) {
	b, err := examples.Specs.ReadFile(file)
	if err != nil {
		return nil, err
	}
	jg, err := parseJob("examples/"+file, b)
	if err != nil {
		return nil, err
	}
	for _, v := range jg.Vertices {
		switch op := v.Operator; {
		case op.GetNatsSource() != nil:
			op.GetNatsSource().Url, op.GetNatsSource().StopAtSequence = d.nats.url, int64(n)
		case op.GetNatsSink() != nil:
			op.GetNatsSink().Url = d.nats.url
		case op.GetPostgresSink() != nil:
			op.GetPostgresSink().Url = d.pg.url()
		}
	}
	jg.JobId = newJobID()
	return jg, nil
}

func (d *pipelineDemo) submit(addr string, jg *pb.JobGraph) error {
	c := d.client(addr)
	defer c.cc.Close()
	if err := c.call(15*time.Second, func(ctx context.Context) error {
		_, err := c.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
		return err
	}); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	return nil
}

// waitStarted waits until every task of the job runs, and fails with the job's cause when it
// ends first.
func (d *pipelineDemo) waitStarted(ctx context.Context, jobID string) error {
	rec, err := d.waitJob(ctx, jobID, 60*time.Second, func(r *pb.JobRecord) bool {
		return (r.Status == pb.JobStatus_JOB_STATUS_RUNNING && allRunning(r)) || graph.IsGloballyTerminal(r.Status)
	})
	if err != nil {
		return err
	}
	if graph.IsGloballyTerminal(rec.Status) {
		return fmt.Errorf("job %s: %s", graph.JobStatusName(rec.Status), rec.GetFailureCause())
	}
	return nil
}

// waitPublished waits until at least n clicks are published.
func (d *pipelineDemo) waitPublished(ctx context.Context, published *atomic.Int64, pubDone chan error, n int) error {
	for published.Load() < int64(n) {
		select {
		case err := <-pubDone:
			pubDone <- err // for the caller's wait
			if err != nil {
				return err
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// waitOutput waits until n clicks are published and the sink committed output.
func (d *pipelineDemo) waitOutput(ctx context.Context, published *atomic.Int64, pubDone chan error, n int) error {
	if err := d.waitPublished(ctx, published, pubDone, n); err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		got, err := d.results(ctx)
		if err == nil && len(got) > 0 {
			d.say("%d clicks published; the sink has committed %d window results", published.Load(), len(got))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no window result committed within 90s of %d clicks published (last: %d results, %v)", published.Load(), len(got), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// killSinkTM kills (SIGKILL) the TaskManager that runs the sink's subtask 0, waits until every
// task runs again, and starts the TaskManager again.
func (d *pipelineDemo) killSinkTM(ctx context.Context, jg *pb.JobGraph) error {
	rec, _, err := d.getJob(jg.JobId)
	if err != nil {
		return err
	}
	sinkVertex := jg.Vertices[len(jg.Vertices)-1].Id
	tm := graph.FindVertex(rec.GetExecutionGraph(), sinkVertex, 0).GetCurrent().GetSlot().GetTmId()
	p := d.Proc(tm)
	if p == nil {
		return fmt.Errorf("the sink's subtask 0 runs on %q, not one of the demo's TaskManagers", tm)
	}
	pid := p.Pid()
	if err := p.Kill(10 * time.Second); err != nil {
		return err
	}
	d.say("KILLED %s (SIGKILL, pid %d), which ran %s[0]", p.Name, pid, sinkVertex)
	after, err := d.waitJob(ctx, jg.JobId, 90*time.Second, func(r *pb.JobRecord) bool {
		return r.GetRestarts() > rec.GetRestarts() && (allRunning(r) || graph.IsGloballyTerminal(r.Status))
	})
	if err != nil {
		return err
	}
	d.say("the failed region restarted from the last completed checkpoint: job %s, restarts %d", graph.JobStatusName(after.Status), after.GetRestarts())
	if err := p.Start(); err != nil {
		return err
	}
	d.say("started %s again", p.Name)
	return nil
}

// killLeader kills the leading JobMaster and waits for the next one and the job running.
func (d *pipelineDemo) killLeader(ctx context.Context, jobID string) error {
	cs, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		return err
	}
	old := d.Proc(cs.LeaderId)
	if old == nil || old.Role != proccluster.JobMaster {
		return fmt.Errorf("leader %s is not one of the demo's JobMasters", cs.LeaderId)
	}
	pid := old.Pid()
	if err := old.Kill(10 * time.Second); err != nil {
		return err
	}
	d.say("KILLED the leader %s (SIGKILL, pid %d)", old.Name, pid)
	next, err := d.waitLeader(ctx, old.Name, 60*time.Second)
	if err != nil {
		return err
	}
	d.say("new leader %s at epoch %d; the job goes on", next.LeaderId, next.Epoch)
	if err := old.Start(); err != nil {
		return err
	}
	return nil
}

// writeSecret writes a credential's file, readable by this user only.
func writeSecret(dir, name string, b []byte) error {
	return os.WriteFile(filepath.Join(dir, name), b, 0o600)
}
