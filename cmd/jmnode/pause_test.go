package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/testcluster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestPausedLeaderIsFencedByEveryTM runs real processes: three JobMasters and three
// TaskManagers of a freshly built jmnode on loopback. The leader is paused with SIGSTOP under a
// running streaming job; a new leader is elected and completes its reconciliation; the old
// leader is resumed with SIGCONT. Every TM refuses the old epoch with STALE_EPOCH, and nothing
// the old leader could do changed the job: the same attempts, still RUNNING, no task stopped.
func TestPausedLeaderIsFencedByEveryTM(t *testing.T) {
	d := newProcessCluster(t, fastProcs)
	dir := d.dir
	ctx := context.Background()

	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.waitFor(ctx, 30*time.Second, "3 TaskManagers registered", func(cs *pb.ClusterStatusResponse) bool {
		n := 0
		for _, tm := range cs.TaskManagers {
			if tm.Slots > 0 && tm.State != "dead" && tm.State != "lost" {
				n++
			}
		}
		return n == 3
	}); err != nil {
		t.Fatal(err)
	}
	jg := testcluster.StreamingChain("paused-leader", 3, 50, 0)
	jg.JobId = newJobID()
	lc := d.client(leader.LeaderGrpcAddress)
	defer lc.cc.Close()
	if err := lc.call(15*time.Second, func(ctx context.Context) error {
		_, err := lc.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
		return err
	}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	before, err := d.waitJob(ctx, jg.JobId, 30*time.Second, allRunning)
	if err != nil {
		t.Fatal(err)
	}
	attempts := testcluster.Attempts(before)

	// Pause the leader; a new one is elected and reconciles while it is frozen.
	old := d.proc(leader.LeaderId)
	if err := old.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var now *pb.ClusterStatusResponse
	if err := d.waitFor(ctx, 30*time.Second, "a new leader with a completed reconciliation", func(cs *pb.ClusterStatusResponse) bool {
		if cs.LeaderId == "" || cs.LeaderId == old.name || cs.Epoch <= leader.Epoch || cs.Reconciling {
			return false
		}
		for _, r := range cs.Reconciliations {
			if r.Epoch == cs.Epoch && r.Outcome == "completed" {
				now = cs
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	if err := old.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s paused at epoch %d; %s leads at epoch %d; %s resumed", old.name, leader.Epoch, now.LeaderId, now.Epoch, old.name)

	// Every TM refuses the old epoch, for a real attempt it runs.
	byTM := map[string]testcluster.Attempt{}
	for _, a := range attempts {
		byTM[a.TM] = a
	}
	for _, p := range d.tms {
		a, ok := byTM[p.name]
		if !ok {
			t.Fatalf("%s runs no task of the job: %v", p.name, attempts)
		}
		cc, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		c := pb.NewTaskManagerServiceClient(cc)
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err = c.CancelTask(cctx, &pb.CancelTaskRequest{Epoch: leader.Epoch, JobId: jg.JobId, AttemptId: a.ID})
		if !transport.IsStaleEpoch(err) {
			t.Errorf("%s: CancelTask at the old epoch %d: %v, want STALE_EPOCH", p.name, leader.Epoch, err)
		}
		_, err = c.SubmitTask(cctx, &pb.SubmitTaskRequest{Epoch: leader.Epoch, Task: &pb.TaskDeploymentDescriptor{JobId: jg.JobId, AttemptId: "00000000000000000000000000000001"}})
		if !transport.IsStaleEpoch(err) {
			t.Errorf("%s: SubmitTask at the old epoch: %v, want STALE_EPOCH", p.name, err)
		}
		stream, err := c.RequestReport(cctx, &pb.RequestReportRequest{Epoch: leader.Epoch})
		if err == nil {
			_, err = stream.Recv()
		}
		if !transport.IsStaleEpoch(err) {
			t.Errorf("%s: RequestReport at the old epoch: %v, want STALE_EPOCH", p.name, err)
		}
		cancel()
		cc.Close()
	}

	// The old leader learns it was deposed; the job is untouched.
	if err := d.waitFor(ctx, 30*time.Second, old.name+" a follower of the new leader", func(cs *pb.ClusterStatusResponse) bool {
		return cs.NodeId == old.name && cs.LeaderId == now.LeaderId && cs.Epoch >= now.Epoch
	}); err != nil {
		t.Fatal(err)
	}
	nc := d.client(now.LeaderGrpcAddress)
	defer nc.cc.Close()
	after, err := readJob(nc, 10*time.Second, jg.JobId, true)
	if err != nil {
		t.Fatal(err)
	}
	if !allRunning(after) || after.Restarts != 0 {
		t.Fatalf("job after the resume: %s, restarts %d", graph.JobStatusName(after.Status), after.Restarts)
	}
	if changed := testcluster.Changed(attempts, testcluster.Attempts(after)); len(changed) != 0 {
		t.Fatalf("attempts changed: %v", changed)
	}
	for _, p := range d.tms {
		b, _ := os.ReadFile(filepath.Join(dir, p.name+"-events.jsonl"))
		if strings.Contains(string(b), `"event":"stop"`) {
			t.Fatalf("%s stopped a task:\n%s", p.name, b)
		}
	}
}

// proc returns the process named name.
func (d *demo) proc(name string) *proc {
	for _, p := range append(append([]*proc{}, d.jms...), d.tms...) {
		if p.name == name {
			return p
		}
	}
	return nil
}

// newProcessCluster builds jmnode into a temporary directory and starts three JobMasters and
// three TaskManagers from it. Every process is killed when the test ends; a failed test
// prints the last lines of each JobMaster's log.
func newProcessCluster(t *testing.T, o procOptions) *demo {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "jmnode")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	d := &demo{bin: bin, dir: dir, start: time.Now()}
	t.Cleanup(func() {
		for _, p := range append(append([]*proc{}, d.jms...), d.tms...) {
			if p.alive() {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
				_ = p.cmd.Process.Kill()
			}
		}
		if t.Failed() {
			for _, p := range d.jms {
				if b, err := os.ReadFile(p.logPath); err == nil {
					lines := strings.Split(string(b), "\n")
					t.Logf("last lines of %s:\n%s", p.name, strings.Join(lines[max(0, len(lines)-60):], "\n"))
				}
			}
		}
	})
	startProcesses(t, d, o)
	return d
}

// procOptions shape the test cluster: the TMs' slots and any extra flags per role.
type procOptions struct {
	slots   int
	jmFlags []string
	tmFlags []string
}

// fastProcs are the timings of the small-job process tests: fast Raft, short deadlines.
var fastProcs = procOptions{
	slots:   4,
	jmFlags: []string{"--gossip-profile", "local", "--fast-raft", "--report-deadline", "3s", "--heartbeat-timeout", "5s"},
	tmFlags: []string{"--gossip-profile", "local", "--heartbeat-interval", "500ms"},
}

// startProcesses spawns three JobMasters and three TaskManagers as the demo does.
func startProcesses(t *testing.T, d *demo, o procOptions) {
	t.Helper()
	ports, err := freePorts(3*4 + 3*3)
	if err != nil {
		t.Fatal(err)
	}
	next := func() string { p := ports[0]; ports = ports[1:]; return p }
	var joins, gossips []string
	for i := 0; i < 3; i++ {
		p := &proc{name: fmt.Sprintf("jm%d", i+1)}
		raft, grpcAddr, http, gossip := next(), next(), next(), next()
		p.grpc, p.http = grpcAddr, "http://"+http
		joins, gossips = append(joins, grpcAddr), append(gossips, gossip)
		p.args = append([]string{"jobmaster", "--id", p.name, "--data-dir", filepath.Join(d.dir, p.name),
			"--raft-addr", raft, "--grpc-addr", grpcAddr, "--http-addr", http, "--gossip-addr", gossip,
			"--bootstrap-expect", "3"}, o.jmFlags...)
		p.logPath = filepath.Join(d.dir, p.name+".log")
		d.jms = append(d.jms, p)
	}
	for _, p := range d.jms {
		p.args = append(p.args, "--join", strings.Join(joins, ","), "--gossip-join", strings.Join(gossips, ","))
		if err := d.spawn(p); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		p := &proc{name: fmt.Sprintf("tm%d", i+1)}
		grpcAddr, data, gossip := next(), next(), next()
		p.grpc, p.workDir = grpcAddr, filepath.Join(d.dir, p.name)
		p.logPath = filepath.Join(d.dir, p.name+".log")
		p.args = append([]string{"taskmanager", "--id", p.name, "--slots", fmt.Sprint(o.slots), "--grpc-addr", grpcAddr, "--data-addr", data,
			"--gossip-addr", gossip, "--gossip-join", strings.Join(gossips, ","),
			"--jm", strings.Join(joins, ","), "--work-dir", p.workDir, "--event-log", filepath.Join(d.dir, p.name+"-events.jsonl")}, o.tmFlags...)
		d.tms = append(d.tms, p)
		if err := d.spawn(p); err != nil {
			t.Fatal(err)
		}
	}
}
