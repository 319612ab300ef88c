//go:build dockertest

// Package deploy_test runs the compose cluster for real (`make test-docker`: it builds the
// image and the development TLS files first). Every step drives what a user drives: docker,
// docker-compose and the jmnode CLI with the operator certificate.
package deploy_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jmcluster/jmcluster/transport/pb"
)

const project = "jmctest" // compose project: its network is jmctest_jmc, its volumes jmctest_*

var (
	jmnode = filepath.Join("..", "bin", "jmnode")
	// The JobMasters' gRPC ports on the host, by container.
	jmPorts = map[string]string{"jm1": "127.0.0.1:7100", "jm2": "127.0.0.1:7101", "jm3": "127.0.0.1:7102"}
)

func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "JMNODE_TLS_CA=tls/jmcluster-ca.pem", "JMNODE_TLS_CERT=tls/operator-admin.pem", "JMNODE_TLS_KEY=tls/operator-admin-key.pem")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func must(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := run(t, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func compose(t *testing.T, args ...string) (string, error) {
	return run(t, "docker-compose", append([]string{"-p", project, "-f", "docker-compose.yml"}, args...)...)
}

// status asks the JobMaster at addr for the cluster status.
func status(t *testing.T, addr string) (*pb.ClusterStatusResponse, error) {
	out, err := run(t, jmnode, "status", "--json", "--addr", addr, "--timeout", "3s")
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(out))
	}
	cs := &pb.ClusterStatusResponse{}
	return cs, protojson.Unmarshal([]byte(out), cs)
}

// waitStatus polls the JobMasters of addrs until cond holds on one, printing what it last saw.
func waitStatus(t *testing.T, what string, limit time.Duration, addrs []string, cond func(*pb.ClusterStatusResponse) bool) *pb.ClusterStatusResponse {
	t.Helper()
	deadline := time.Now().Add(limit)
	last := ""
	for time.Now().Before(deadline) {
		for _, a := range addrs {
			cs, err := status(t, a)
			if err != nil {
				last = a + ": " + err.Error()
				continue
			}
			if cond(cs) {
				return cs
			}
			last = fmt.Sprintf("%s: leader %q epoch %d reconciling %v, %d TMs", a, cs.LeaderId, cs.Epoch, cs.Reconciling, len(cs.TaskManagers))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s (last seen: %s)", limit, what, last)
	return nil
}

// job reads a job with every execution.
func job(t *testing.T, addr, id string) *pb.GetJobResponse {
	t.Helper()
	out := must(t, jmnode, "job", "status", id, "--all", "--json", "--addr", addr)
	r := &pb.GetJobResponse{}
	if err := protojson.Unmarshal([]byte(out), r); err != nil {
		t.Fatalf("job status --json: %v\n%s", err, out)
	}
	return r
}

func attempts(r *pb.GetJobResponse) map[string]string {
	out := map[string]string{}
	for _, ev := range r.Executions {
		out[fmt.Sprintf("%s[%d]", ev.VertexId, ev.SubtaskIndex)] = fmt.Sprintf("%s#%d", ev.GetCurrent().GetAttemptId(), ev.GetCurrent().GetAttemptNumber())
	}
	return out
}

func running(r *pb.GetJobResponse) bool {
	for _, ev := range r.Executions {
		if ev.GetCurrent().GetState() != pb.ExecutionState_EXECUTION_STATE_RUNNING {
			return false
		}
	}
	return len(r.Executions) > 0
}

func health(t *testing.T, container string) string {
	out, _ := run(t, "docker", "inspect", "--format", "{{.State.Health.Status}}", container)
	return strings.TrimSpace(out)
}

// TestComposeCluster: `docker-compose up` of deploy/docker-compose.yml (three JobMasters and
// three TaskManagers, mutual TLS, encrypted gossip, data volumes, health checks); every
// container becomes healthy; a streaming job runs; `docker kill` of the leader's container: a
// new leader reconciles every task as kept running, with the same attempt ids and no restart;
// the killed JobMaster starts again from its volume and follows; `docker network disconnect`
// of a follower and `connect` again: the cluster keeps its leader and the follower catches up.
// The cluster and its volumes are removed at the end, also on failure.
func TestComposeCluster(t *testing.T) {
	if out, _ := run(t, "docker", "ps", "-a", "--filter", "name=^jmc-", "--format", "{{.Names}} {{.Label \"com.docker.compose.project\"}}"); strings.TrimSpace(out) != "" {
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasSuffix(l, " "+project) {
				t.Fatalf("containers of another deploy/docker-compose.yml cluster exist (make cluster-down first):\n%s", out)
			}
		}
	}
	_, _ = compose(t, "down", "-v", "--remove-orphans")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := compose(t, "logs", "--no-color", "--tail", "60")
			t.Logf("compose logs:\n%s", out)
		}
		if out, err := compose(t, "down", "-v", "--remove-orphans"); err != nil {
			t.Logf("compose down: %v\n%s", err, out)
		}
	})
	start := time.Now()
	if out, err := compose(t, "up", "-d"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	all := []string{jmPorts["jm1"], jmPorts["jm2"], jmPorts["jm3"]}
	cs := waitStatus(t, "an established leader and three TaskManagers", 120*time.Second, all, func(cs *pb.ClusterStatusResponse) bool {
		alive := 0
		for _, tm := range cs.TaskManagers {
			if tm.State == "alive" {
				alive++
			}
		}
		return cs.LeaderGrpcAddress != "" && !cs.Reconciling && alive == 3
	})
	t.Logf("up in %s: %s leads at epoch %d", time.Since(start).Round(time.Second), cs.LeaderId, cs.Epoch)
	containers := []string{"jmc-jm1", "jmc-jm2", "jmc-jm3", "jmc-tm1", "jmc-tm2", "jmc-tm3"}
	deadline := time.Now().Add(90 * time.Second)
	for _, c := range containers {
		for health(t, c) != "healthy" {
			if time.Now().After(deadline) {
				t.Fatalf("%s is %q, not healthy", c, health(t, c))
			}
			time.Sleep(time.Second)
		}
	}
	t.Logf("all six containers healthy")

	out := must(t, jmnode, "job", "submit", filepath.Join("..", "examples", "streaming-checksum.json"), "--wait", "--addr", all[0])
	id := ""
	if f := strings.Fields(out); len(f) >= 3 && f[0] == "submitted" {
		id = f[2]
	}
	if id == "" {
		t.Fatalf("job submit: %s", out)
	}
	before := job(t, all[0], id)
	if !running(before) {
		t.Fatalf("the job is not RUNNING after submit --wait: %v", before.Summary)
	}
	tasks := len(before.Executions)

	// Kill the leader's container.
	old := cs
	if out, err := run(t, "docker", "kill", "jmc-"+old.LeaderId); err != nil {
		t.Fatalf("docker kill: %v\n%s", err, out)
	}
	killed := time.Now()
	var live []string
	for name, a := range jmPorts {
		if name != old.LeaderId {
			live = append(live, a)
		}
	}
	slices.Sort(live)
	now := waitStatus(t, "a new leader with a completed reconciliation", 60*time.Second, live, func(cs *pb.ClusterStatusResponse) bool {
		if cs.LeaderGrpcAddress == "" || cs.LeaderId == old.LeaderId || cs.Epoch <= old.Epoch || cs.Reconciling {
			return false
		}
		for _, r := range cs.Reconciliations {
			if r.Epoch == cs.Epoch && r.Outcome == "completed" {
				return true
			}
		}
		return false
	})
	var rec *pb.ReconciliationRecord
	for _, r := range now.Reconciliations {
		if r.Epoch == now.Epoch {
			rec = r
		}
	}
	if c := rec.GetCounts(); c.GetKeptRunning() != int64(tasks) || c.GetFailed() != 0 || c.GetMissing() != 0 {
		t.Fatalf("reconciliation after the leader kill: %v, want %d kept running", c, tasks)
	}
	after := job(t, live[0], id)
	if !running(after) || !maps(attempts(before), attempts(after)) || after.Summary.GetRestarts() != before.Summary.GetRestarts() {
		t.Fatalf("after the leader kill: running %v, attempts the same %v, restarts %d -> %d", running(after),
			maps(attempts(before), attempts(after)), before.Summary.GetRestarts(), after.Summary.GetRestarts())
	}
	t.Logf("docker kill of %s: %s leads at epoch %d after %s, %d of %d tasks kept with the same attempts, no restart",
		old.LeaderId, now.LeaderId, now.Epoch, time.Since(killed).Round(time.Millisecond), rec.GetCounts().GetKeptRunning(), tasks)

	// The killed JobMaster starts again from its volume and follows the new leader.
	must(t, "docker", "start", "jmc-"+old.LeaderId)
	waitStatus(t, old.LeaderId+" following again", 60*time.Second, []string{jmPorts[old.LeaderId]}, func(cs *pb.ClusterStatusResponse) bool {
		return cs.LeaderId == now.LeaderId && cs.Epoch == now.Epoch && cs.AppliedIndex > 0
	})

	// Cut a follower off the network and connect it again.
	follower := ""
	for name := range jmPorts {
		if name != now.LeaderId && (follower == "" || name < follower) {
			follower = name
		}
	}
	network := project + "_jmc"
	must(t, "docker", "network", "disconnect", network, "jmc-"+follower)
	var others []string
	for name, a := range jmPorts {
		if name != follower {
			others = append(others, a)
		}
	}
	waitStatus(t, "the leader without "+follower, 30*time.Second, others, func(cs *pb.ClusterStatusResponse) bool {
		return cs.LeaderGrpcAddress != "" && !cs.Reconciling
	})
	must(t, "docker", "network", "connect", "--alias", follower, network, "jmc-"+follower)
	back := waitStatus(t, follower+" connected again, following", 60*time.Second, []string{jmPorts[follower]}, func(cs *pb.ClusterStatusResponse) bool {
		return cs.LeaderGrpcAddress != "" && cs.AppliedIndex > 0 && cs.AppliedIndex >= cs.CommitIndex
	})
	final := job(t, others[0], id)
	if !running(final) || !maps(attempts(before), attempts(final)) {
		t.Fatalf("after the network cut: running %v, attempts the same %v", running(final), maps(attempts(before), attempts(final)))
	}
	t.Logf("%s cut off and connected again: it follows %s at epoch %d; the job kept its %d attempts", follower, back.LeaderId, back.Epoch, tasks)
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
