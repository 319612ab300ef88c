package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/examples"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The demo runs real processes (this binary, through internal/proccluster) on loopback: three
// JobMasters and three TaskManagers, submits a streaming job, kills the leader with SIGKILL and
// shows the reconciliation step by step from the new leader's reconciliation record.

type demo struct {
	*procs
	start time.Time
}

func runDemo(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	usageFor(fs, "jmnode demo [--keep] [--job FILE]",
		"Runs a local cluster of 3 JobMasters and 3 TaskManagers as separate processes on loopback,\n"+
			"submits a streaming job, kills the leader (SIGKILL) and shows the reconciliation step by step:\n"+
			"a new leader, the job RECONCILING, the TaskManager reports, the commit, RUNNING again, zero\n"+
			"task restarts and a sink output with no gap and no duplicate.")
	keep := fs.Bool("keep", false, "leave the cluster running at the end and print its addresses (Ctrl-C stops it)")
	jobFile := fs.String("job", "", "job spec to run (default: examples/streaming-checksum.json, built in)")
	dir := fs.String("dir", "", "directory for data, logs and sink output (default: a new temporary directory)")
	deadline := fs.Duration("report-deadline", 5*time.Second, "the JobMasters' report deadline")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	work := *dir
	if work == "" {
		if work, err = os.MkdirTemp("", "jmcluster-demo-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	jg, err := loadDemoJob(*jobFile)
	if err != nil {
		return err
	}
	p, err := newProcs(bin, work, proccluster.LocalOptions{Slots: 4,
		JMFlags: []string{"--gossip-profile", "local", "--fast-raft", "--report-deadline", deadline.String(), "--heartbeat-timeout", "5s", "--tm-heartbeat-interval", "500ms"},
		TMFlags: []string{"--gossip-profile", "local", "--heartbeat-interval", "500ms", "--fence-timeout", "2s"}})
	if err != nil {
		return err
	}
	d := &demo{procs: p, start: time.Now()}
	defer func() {
		if !*keep {
			d.Stop(5 * time.Second)
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := d.run(ctx, jg); err != nil {
		d.say("FAILED: %v", err)
		d.say("logs are in %s", d.dir)
		return err
	}
	if *keep {
		d.say("cluster left running (Ctrl-C stops it):")
		for _, p := range d.Procs() {
			if p.Running() {
				http := ""
				if p.Addrs.HTTP != "" {
					http = "http://" + p.Addrs.HTTP
				}
				d.say("  %-4s pid %-7d grpc %s  %s  log %s", p.Name, p.Pid(), p.Addrs.GRPC, http, p.LogPath)
			}
		}
		d.say("try: JMNODE_ADDR=%s ./bin/jmnode status", d.liveJM().Addrs.GRPC)
		<-ctx.Done()
		d.Stop(5 * time.Second)
		return nil
	}
	_ = os.RemoveAll(d.dir)
	return nil
}

func (d *demo) say(format string, args ...any) {
	fmt.Printf("[%6.2fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// loadDemoJob reads the job spec of --job, or the embedded examples/streaming-checksum.json.
func loadDemoJob(path string) (*pb.JobGraph, error) {
	if path != "" {
		return LoadJobFile(path)
	}
	b, err := examples.Specs.ReadFile(examples.StreamingChecksum)
	if err != nil {
		return nil, err
	}
	return parseJob("examples/"+examples.StreamingChecksum, b)
}

func (d *demo) run(ctx context.Context, jg *pb.JobGraph) error {
	d.say("jmcluster demo: 3 JobMasters + 3 TaskManagers on loopback; working directory %s", d.dir)
	for _, p := range d.JMs {
		if err := p.Start(); err != nil {
			return err
		}
	}
	d.say("started jm1, jm2, jm3 (Raft bootstrap-expect 3, gossip, fast Raft timings)")
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		return err
	}
	d.say("leader elected: %s at epoch %d", leader.LeaderId, leader.Epoch)
	for _, p := range d.TMs {
		if err := p.Start(); err != nil {
			return err
		}
	}
	d.say("started tm1, tm2, tm3 (4 slots each)")
	if err := d.waitTMs(ctx, 30*time.Second, 3, 0); err != nil {
		return err
	}
	d.say("3 TaskManagers registered with the leader")

	jg.JobId = newJobID()
	lc := d.client(leader.LeaderGrpcAddress)
	defer lc.cc.Close()
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
	for _, line := range placementLines(before) {
		d.say("%s", line)
	}
	if err := d.waitSink(ctx, jg.JobId, 1000); err != nil {
		return err
	}
	s0 := d.sinkTotals(jg.JobId)
	d.say("records are flowing: the checksum sinks have seen %d records (gaps %d, duplicates %d)", s0.count, s0.gaps, s0.dups)

	// Kill the leader.
	old := d.Proc(leader.LeaderId)
	if old == nil || old.Role != proccluster.JobMaster {
		return fmt.Errorf("leader %s is not one of the demo's JobMasters", leader.LeaderId)
	}
	killAt, pid := time.Now(), old.Pid()
	if err := old.Kill(10 * time.Second); err != nil {
		return err
	}
	d.say("KILLED the leader %s (SIGKILL, pid %d)", old.Name, pid)

	if err := d.watchFailover(ctx, jg.JobId, old.Name, leader.Epoch, killAt); err != nil {
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
	if err := old.Start(); err != nil {
		return err
	}
	d.say("restarted %s from its data directory", old.Name)
	if err := d.waitFor(ctx, 30*time.Second, old.Name+" back as a follower", func(cs *pb.ClusterStatusResponse) bool {
		for _, p := range cs.Peers {
			if p.Id == old.Name && !p.Leader {
				return true
			}
		}
		return false
	}); err != nil {
		return err
	}
	oc := d.client(old.Addrs.GRPC)
	defer oc.cc.Close()
	// A replica that has just restarted serves its own state, which it rebuilds by applying the
	// log once the leader tells it the commit index: until then the job is unknown there, and
	// the call is tried again.
	if err := oc.call(20*time.Second, func(ctx context.Context) error {
		r, err := oc.client().GetJob(ctx, &pb.GetJobRequest{JobId: jg.JobId})
		if status.Code(err) == codes.NotFound {
			return status.Errorf(codes.Unavailable, "%s has not applied the job yet: %v", old.Name, err)
		}
		if err == nil && r.Job.Status != pb.JobStatus_JOB_STATUS_RUNNING {
			err = fmt.Errorf("job is %s on %s", graph.JobStatusName(r.Job.Status), old.Name)
		}
		return err
	}); err != nil {
		return err
	}
	d.say("%s caught up: it serves the job as RUNNING", old.Name)
	d.say("done in %s", time.Since(d.start).Round(10*time.Millisecond))
	return nil
}

func describeJob(jg *pb.JobGraph) string {
	var parts []string
	for _, v := range jg.Vertices {
		parts = append(parts, fmt.Sprintf("%s x%d", v.Id, v.Parallelism))
	}
	return strings.Join(parts, " -> ")
}

// placementLines describes where each failover region of the job runs: its members and the
// slots (TM/index) they occupy, so a reader sees which TM holds which region and what a TM's
// loss would restart.
func placementLines(rec *pb.JobRecord) []string {
	regions, err := graph.FailoverRegions(rec.GetJobGraph())
	if err != nil {
		return []string{"placement: " + err.Error()}
	}
	lines := []string{fmt.Sprintf("placement: %d failover regions; a region's tasks share a slot (one subtask of each vertex), regions spread over the TaskManagers:", len(regions))}
	for _, r := range regions {
		var members, slots []string
		seen := map[string]bool{}
		tms := map[string]bool{}
		for _, m := range r.Members {
			members = append(members, fmt.Sprintf("%s[%d]", m.VertexID, m.Subtask))
			e := graph.FindVertex(rec.GetExecutionGraph(), m.VertexID, m.Subtask).GetCurrent()
			slot := fmt.Sprintf("%s/%d", e.GetSlot().GetTmId(), e.GetSlot().GetIndex())
			tms[e.GetSlot().GetTmId()] = true
			if !seen[slot] {
				seen[slot] = true
				slots = append(slots, slot)
			}
		}
		const show = 6
		if len(members) > show {
			members = append(members[:show], fmt.Sprintf("... (%d tasks)", len(r.Members)))
		}
		if len(slots) > show {
			slots = append(slots[:show], fmt.Sprintf("... (%d slots)", len(seen)))
		}
		plural := func(n int, word string) string {
			if n == 1 {
				return word
			}
			return word + "s"
		}
		lines = append(lines, fmt.Sprintf("  region %d: %s in %s %s (%d %s)", r.ID, strings.Join(members, " "),
			plural(len(seen), "slot"), strings.Join(slots, " "), len(tms), plural(len(tms), "TaskManager")))
	}
	return lines
}
