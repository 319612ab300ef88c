package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestPausedLeaderIsFencedByEveryTM runs real processes: three JobMasters and three
// TaskManagers of a freshly built jmnode on loopback. The leader is paused with SIGSTOP under a
// running streaming job; a new leader is elected and completes its reconciliation; the old
// leader is resumed with SIGCONT. Every TM refuses the old epoch with STALE_EPOCH, and nothing
// the old leader could do changed the job: the same attempts, still RUNNING, no task stopped.
func TestPausedLeaderIsFencedByEveryTM(t *testing.T) {
	t.Parallel()
	d := newProcessCluster(t, fastProcs)
	ctx := context.Background()

	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.waitTMs(ctx, 30*time.Second, 3, 0); err != nil {
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
	old := d.Proc(leader.LeaderId)
	if err := old.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var now *pb.ClusterStatusResponse
	if err := d.waitFor(ctx, 30*time.Second, "a new leader with a completed reconciliation", func(cs *pb.ClusterStatusResponse) bool {
		if cs.LeaderId == "" || cs.LeaderId == old.Name || cs.Epoch <= leader.Epoch || cs.Reconciling {
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
	if err := old.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s paused at epoch %d; %s leads at epoch %d; %s resumed", old.Name, leader.Epoch, now.LeaderId, now.Epoch, old.Name)

	// Every TM refuses the old epoch, for a real attempt it runs.
	byTM := map[string]testcluster.Attempt{}
	for _, a := range attempts {
		byTM[a.TM] = a
	}
	for _, p := range d.TMs {
		a, ok := byTM[p.Name]
		if !ok {
			t.Fatalf("%s runs no task of the job: %v", p.Name, attempts)
		}
		cc, err := grpc.NewClient(p.Addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		c := pb.NewTaskManagerServiceClient(cc)
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err = c.CancelTask(cctx, &pb.CancelTaskRequest{Epoch: leader.Epoch, JobId: jg.JobId, AttemptId: a.ID})
		if !transport.IsStaleEpoch(err) {
			t.Errorf("%s: CancelTask at the old epoch %d: %v, want STALE_EPOCH", p.Name, leader.Epoch, err)
		}
		_, err = c.SubmitTask(cctx, &pb.SubmitTaskRequest{Epoch: leader.Epoch, Task: &pb.TaskDeploymentDescriptor{JobId: jg.JobId, AttemptId: "00000000000000000000000000000001"}})
		if !transport.IsStaleEpoch(err) {
			t.Errorf("%s: SubmitTask at the old epoch: %v, want STALE_EPOCH", p.Name, err)
		}
		stream, err := c.RequestReport(cctx, &pb.RequestReportRequest{Epoch: leader.Epoch})
		if err == nil {
			_, err = stream.Recv()
		}
		if !transport.IsStaleEpoch(err) {
			t.Errorf("%s: RequestReport at the old epoch: %v, want STALE_EPOCH", p.Name, err)
		}
		cancel()
		cc.Close()
	}

	// The old leader learns it was deposed; the job is untouched.
	if err := d.waitFor(ctx, 30*time.Second, old.Name+" a follower of the new leader", func(cs *pb.ClusterStatusResponse) bool {
		return cs.NodeId == old.Name && cs.LeaderId == now.LeaderId && cs.Epoch >= now.Epoch
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
	for _, p := range d.TMs {
		b, _ := os.ReadFile(p.EventLog)
		if strings.Contains(string(b), `"event":"stop"`) {
			t.Fatalf("%s stopped a task:\n%s", p.Name, b)
		}
	}
}

// newProcessCluster builds jmnode into a temporary directory and starts three JobMasters and
// three TaskManagers from it (internal/proccluster). Every process is killed when the test
// ends; a failed test prints the last lines of each JobMaster's and TaskManager's log.
func newProcessCluster(t *testing.T, o proccluster.LocalOptions) *procs {
	t.Helper()
	return newProcessClusterOf(t, o, nil)
}

// jmnodeBins are the jmnode binaries this test process built, by their build tags, in binDir:
// the tests, running in parallel, share one build of each (a link takes seconds of CPU).
// TestMain removes binDir.
var (
	jmnodeBinsMu sync.Mutex
	jmnodeBins   = map[string]string{}
	binDir       string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildJmnode builds this package's jmnode with the build tags given, once per test process,
// and returns its path.
func buildJmnode(t *testing.T, tags ...string) string {
	t.Helper()
	jmnodeBinsMu.Lock()
	defer jmnodeBinsMu.Unlock()
	key := strings.Join(tags, ",")
	if bin, ok := jmnodeBins[key]; ok {
		return bin
	}
	if binDir == "" {
		dir, err := os.MkdirTemp("", "jmnode-test-bin")
		if err != nil {
			t.Fatal(err)
		}
		binDir = dir
	}
	bin := filepath.Join(binDir, strings.Join(append([]string{"jmnode"}, tags...), "-"))
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", key)
	}
	build := exec.Command("go", append(args, ".")...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	jmnodeBins[key] = bin
	return bin
}

// newProcessClusterOf is newProcessCluster with the nodes edited before the cluster is made
// (edit may be nil); edit gets the cluster's directory.
func newProcessClusterOf(t *testing.T, o proccluster.LocalOptions, edit func(dir string, nodes []proccluster.Node)) *procs {
	t.Helper()
	dir := t.TempDir()
	bin := buildJmnode(t)
	nodes, err := proccluster.Local(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(dir, nodes)
	}
	return startProcessCluster(t, dir, bin, nodes)
}

// startProcessCluster makes and starts the cluster of nodes, run by bin under dir; it is
// killed when the test ends (a failed test logs and keeps the JobMasters' logs).
func startProcessCluster(t *testing.T, dir, bin string, nodes []proccluster.Node) *procs {
	t.Helper()
	c, err := proccluster.New(bin, nodes)
	if err != nil {
		t.Fatal(err)
	}
	d := &procs{Cluster: c, dir: dir}
	t.Cleanup(func() {
		for _, p := range d.Procs() {
			_ = p.Signal(syscall.SIGCONT)
			_ = p.Kill(10 * time.Second)
		}
		if t.Failed() {
			for _, p := range d.JMs {
				t.Logf("last lines of %s:\n%s", p.Name, p.LogTail(60))
			}
			for _, p := range d.TMs { // a TM that never registered says why here
				t.Logf("last lines of %s:\n%s", p.Name, p.LogTail(30))
			}
			keepProcessLogs(t, dir)
		}
	})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	return d
}

// fastProcs are the timings of the small-job process tests: fast Raft, short deadlines.
var fastProcs = proccluster.LocalOptions{
	Slots:   4,
	JMFlags: []string{"--gossip-profile", "local", "--fast-raft", "--report-deadline", "3s", "--heartbeat-timeout", "5s", "--tm-heartbeat-interval", "500ms"},
	TMFlags: []string{"--gossip-profile", "local", "--heartbeat-interval", "500ms"},
}

// keepProcessLogs copies the processes' logs of a failed test into $JMC_TEST_LOG_DIR/<test>/,
// as the in-process clusters keep theirs.
func keepProcessLogs(t *testing.T, dir string) {
	keep := os.Getenv("JMC_TEST_LOG_DIR")
	if keep == "" {
		return
	}
	dst := filepath.Join(keep, t.Name()+"-"+time.Now().Format("150405.000"))
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	more, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
	for _, f := range append(logs, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if err := os.MkdirAll(dst, 0o755); err == nil {
			_ = os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644)
		}
	}
	t.Logf("process logs kept in %s", dst)
}
