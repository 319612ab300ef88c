package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// startOutcome is what a process did in its first moments: exited (with its code and
// stderr), or was still running at the deadline (killed then).
type startOutcome struct {
	exited bool
	code   int
	stderr string
}

// startAndWait runs bin with args and waits up to limit for it to exit; a process still
// running then is killed and reported as running.
func startAndWait(t *testing.T, bin string, args []string, limit time.Duration) startOutcome {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr, cmd.Stdout = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", args, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return startOutcome{exited: true, code: cmd.ProcessState.ExitCode(), stderr: stderr.String()}
	case <-time.After(limit):
		cancel()
		<-done
		return startOutcome{stderr: stderr.String()}
	}
}

// TestTaskManagerRefusesSlotsOverTheLeadersLimitAtStart: `jmnode taskmanager --slots 1025`
// exits at start, non-zero, naming --slots, the value and the range the leader accepts; 1024,
// the top of that range, starts.
func TestTaskManagerRefusesSlotsOverTheLeadersLimitAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := buildJmnode(t)
	jm := testcluster.FreePorts(t, 1)[0] // nothing needs to listen there: the TM starts without a leader
	tm := func(slots int) []string {
		return []string{"taskmanager", "--id", fmt.Sprintf("tm-%d", slots), "--slots", fmt.Sprint(slots), "--jm", jm,
			"--grpc-addr", "127.0.0.1:0", "--data-addr", "127.0.0.1:0", "--work-dir", filepath.Join(dir, fmt.Sprint(slots))}
	}
	got := startAndWait(t, bin, tm(1025), 20*time.Second)
	want := fmt.Sprintf("--slots 1025: must be in [%d, %d]", transport.MinSlots, transport.MaxSlots)
	if !got.exited || got.code == 0 || !strings.Contains(got.stderr, want) {
		t.Fatalf("--slots 1025: exited %v, code %d, want a non-zero exit saying %q; output:\n%s", got.exited, got.code, want, got.stderr)
	}
	if strings.Contains(got.stderr, "taskmanager started") {
		t.Fatalf("--slots 1025 started before it refused:\n%s", got.stderr)
	}
	t.Logf("--slots 1025: exit %d: %s", got.code, strings.TrimSpace(got.stderr))

	// In a cluster: three TaskManagers with --slots 1025 beside one with 1024, the top of the
	// range. The three exit at start naming the flag and the range; the fourth runs the whole
	// demo job.
	nodes, err := proccluster.Local(dir, proccluster.LocalOptions{JMs: 1, TMs: 4, Slots: 1025,
		JMFlags: fastProcs.JMFlags, TMFlags: fastProcs.TMFlags})
	if err != nil {
		t.Fatal(err)
	}
	nodes[len(nodes)-1].Slots = transport.MaxSlots
	d := startProcessCluster(t, dir, bin, nodes)
	for _, p := range d.TMs[:3] {
		select {
		case <-p.Exited():
		case <-time.After(20 * time.Second):
			t.Fatalf("%s with --slots 1025 still runs; its log:\n%s", p.Name, p.LogTail(20))
		}
		if log := p.LogTail(5); !strings.Contains(log, want) {
			t.Fatalf("%s exited without saying %q:\n%s", p.Name, want, log)
		}
	}
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.waitTMs(ctx, 30*time.Second, 1, transport.MaxSlots); err != nil {
		t.Fatal(err)
	}
	jg, err := LoadJobFile("../../examples/streaming-checksum.json")
	if err != nil {
		t.Fatal(err)
	}
	jg.JobId = newJobID()
	c := d.client(leader.LeaderGrpcAddress)
	defer c.cc.Close()
	if err := c.call(15*time.Second, func(ctx context.Context) error {
		_, err := c.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
		return err
	}); err != nil {
		t.Fatalf("submit the demo job: %v", err)
	}
	rec, err := d.waitAllRunning(ctx, jg.JobId, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range testcluster.Attempts(rec) {
		if a.TM != "tm4" {
			t.Fatalf("an attempt runs on %s, not tm4: %v", a.TM, testcluster.Attempts(rec))
		}
	}
	t.Logf("tm1-tm3 refused --slots 1025 at start; tm4 (--slots 1024) runs all %d tasks of the demo job", len(testcluster.Attempts(rec)))
}

// badValue is one row of the misconfiguration matrix: a flag of a process, an invalid value
// (args, appended to a valid command line) and why it is invalid.
type badValue struct {
	process string // "jobmaster" or "taskmanager"
	flag    string // without dashes
	args    []string
	why     string
	also    string // another flag the error must name, when the refusal is of two together
}

// misconfigurations returns the matrix's invalid values. file is a regular file (a path
// under it cannot be a directory).
func misconfigurations(file string) []badValue {
	under := filepath.Join(file, "sub")
	jm := func(flag, why string, args ...string) badValue {
		return badValue{process: "jobmaster", flag: flag, args: args, why: why}
	}
	tm := func(flag, why string, args ...string) badValue {
		return badValue{process: "taskmanager", flag: flag, args: args, why: why}
	}
	var rows []badValue
	// Flags both processes have, with the same rule.
	for _, p := range []string{"jobmaster", "taskmanager"} {
		b := func(flag, why string, args ...string) badValue {
			return badValue{process: p, flag: flag, args: args, why: why}
		}
		rows = append(rows,
			b("id", "required", "--id", ""),
			b("grpc-addr", "unparsable", "--grpc-addr", "127.0.0.1"),
			b("grpc-advertise", "port out of range", "--grpc-advertise", "127.0.0.1:70000"),
			b("http-addr", "unparsable", "--http-addr", "localhost:http-port"),
			b("pprof-addr", "unparsable", "--pprof-addr", "127.0.0.1"),
			b("max-message-size", "below the 4 MiB the reports, pages and batches are cut for", "--max-message-size", "4194303"),
			b("max-message-size", "above the ceiling", "--max-message-size", "2147483647"),
			b("checkpoint-dir", "unwritable path", "--checkpoint-dir", under),
			b("gossip-addr", "port out of range", "--gossip-addr", "127.0.0.1:99999"),
			b("gossip-join", "unparsable", "--gossip-addr", "127.0.0.1:0", "--gossip-join", "a:b:c"),
			b("gossip-key", "not base64", "--gossip-addr", "127.0.0.1:0", "--gossip-key", "not-a-key!"),
			b("gossip-key", "wrong length", "--gossip-addr", "127.0.0.1:0", "--gossip-key", "c2hvcnQ="),
			b("gossip-key-file", "missing file", "--gossip-addr", "127.0.0.1:0", "--gossip-key-file", under),
			b("gossip-keyring", "unwritable path", "--gossip-addr", "127.0.0.1:0", "--gossip-keyring", filepath.Join(under, "k")),
			b("gossip-profile", "unknown name", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "wan"),
			b("log-level", "unknown name", "--log-level", "loud"),
			b("log-format", "unknown name", "--log-format", "xml"),
			b("tls-ca", "missing file", "--tls-ca", under, "--tls-cert", file, "--tls-key", file),
			b("tls-cert", "without --tls-ca and --tls-key", "--tls-cert", file),
			b("tls-key", "without --tls-ca and --tls-cert", "--tls-key", file),
			b("config", "missing file", "--config", under),
			b("checkpoint-dir", "a regular file", "--checkpoint-dir", file),
			withAlso(b("gossip-key", "without --gossip-addr (gossip off: the key would be ignored)", "--gossip-key", validGossipKey), "--gossip-addr"),
			withAlso(b("gossip-key-file", "without --gossip-addr (gossip off: the key would be ignored)", "--gossip-key-file", file), "--gossip-addr"),
		)
	}
	rows = append(rows,
		jm("data-dir", "unwritable path", "--data-dir", under),
		jm("data-dir", "required", "--data-dir", ""),
		jm("raft-addr", "unparsable", "--raft-addr", "127.0.0.1"),
		jm("raft-addr", "every interface, no advertise address", "--raft-addr", "0.0.0.0:7000"),
		jm("raft-advertise", "not dialable", "--raft-advertise", "0.0.0.0:7000"),
		jm("grpc-addr", "port 0 (others dial the advertised address)", "--grpc-addr", "127.0.0.1:0"),
		jm("bootstrap-expect", "negative", "--bootstrap-expect", "-1"),
		jm("bootstrap-expect", "without --join", "--bootstrap-expect", "3"),
		jm("join", "unparsable", "--join", "a:b:c"),
		jm("peers", "without this node", "--peers", "jm9=127.0.0.1:1@127.0.0.1:2"),
		jm("peers", "unparsable", "--peers", "nonsense"),
		jm("report-deadline", "zero", "--report-deadline", "0s"),
		jm("report-deadline", "negative", "--report-deadline", "-1s"),
		jm("report-deadline", "wrong unit", "--report-deadline", "10"),
		jm("heartbeat-timeout", "zero", "--heartbeat-timeout", "0s"),
		jm("heartbeat-timeout", "shorter than the isolation rule needs", "--heartbeat-timeout", "8s", "--fence-timeout", "5s"),
		jm("fence-timeout", "negative", "--fence-timeout", "-1s"),
		jm("fence-timeout", "within two heartbeat intervals and a pool query", "--fence-timeout", "2s"),
		jm("pool-query-interval", "negative", "--pool-query-interval", "-1ms"),
		jm("pool-query-timeout", "negative", "--pool-query-timeout", "-1ms"),
		jm("tm-heartbeat-interval", "zero", "--tm-heartbeat-interval", "0s"),
		jm("tm-heartbeat-interval", "wrong unit", "--tm-heartbeat-interval", "1 second"),
		jm("tm-heartbeat-interval", "below the floor", "--tm-heartbeat-interval", "99ms"),
		jm("tm-leader-grace", "ends before the pool is asked", "--tm-leader-grace", "6s"),
		jm("tm-leader-grace", "zero", "--tm-leader-grace", "0s"),
		jm("dead-refusals", "zero", "--dead-refusals", "0"),
		jm("dead-refusal-window", "zero", "--dead-refusal-window", "0s"),
		jm(graph.LimitExecutions, "zero", "--"+graph.LimitExecutions, "0"),
		jm(graph.LimitExecutions, "above the replicated ceiling", "--"+graph.LimitExecutions, "131073"),
		jm(graph.LimitInputChannels, "above the replicated ceiling", "--"+graph.LimitInputChannels, "1048577"),
		jm(graph.LimitGraphBytes, "above the replicated ceiling", "--"+graph.LimitGraphBytes, "100663297"),
		jm("retain-jobs", "zero", "--retain-jobs", "0"),
		jm("retain-job-age", "zero", "--retain-job-age", "0s"),
		withAlso(jm("artifact-max-bytes", "above the replicated ceiling", "--artifact-max-bytes", "67108865"), "67108864"),
		jm("artifact-max-total-bytes", "above the replicated ceiling", "--artifact-max-total-bytes", "1073741825"),
		jm("artifact-max-count", "zero", "--artifact-max-count", "0"),
		jm("fast-raft", "unparsable", "--fast-raft=maybe"),
		jm("slot-timeout", "zero", "--slot-timeout", "0s"),
		jm("slot-timeout", "within two heartbeat intervals", "--slot-timeout", "2s"),
		jm("cleanup-dead-servers", "negative", "--cleanup-dead-servers", "-1s"),
		jm("cleanup-dead-servers", "without gossip", "--cleanup-dead-servers", "1m"),
		jm("min-quorum", "zero", "--min-quorum", "0"),
		jm("raft-snapshot-threshold", "zero", "--raft-snapshot-threshold", "0"),
		jm("raft-snapshot-interval", "below the floor", "--raft-snapshot-interval", "99ms"),
		jm("client-write-rate", "zero: no write after the first burst", "--client-write-rate", "0"),
		jm("client-write-rate", "not a number", "--client-write-rate", "NaN"),
		jm("client-write-burst", "zero", "--client-write-burst", "0"),
		jm("token-file", "without TLS", "--token-file", file),
		jm("http-metrics-auth", "unparsable", "--http-metrics-auth=maybe"),

		tm("slots", "above the leader's limit", "--slots", "1025"),
		tm("slots", "zero", "--slots", "0"),
		tm("max-record-size", "negative", "--max-record-size", "-1"),
		tm("max-record-size", "above a quarter of --max-message-size", "--max-record-size", "1048577"),
		tm("data-addr", "unparsable", "--data-addr", "nowhere"),
		tm("data-advertise", "port 0", "--data-advertise", "127.0.0.1:0"),
		tm("jm", "unparsable", "--jm", "a:b:c"),
		tm("work-dir", "unwritable path", "--work-dir", under),
		tm("artifact-cache-dir", "unwritable path", "--artifact-cache-dir", under),
		tm("artifact-cache-bytes", "zero", "--artifact-cache-bytes", "0"),
		tm("secrets-dir", "a file", "--secrets-dir", file),
		tm("secrets-dir", "missing", "--secrets-dir", filepath.Join(filepath.Dir(file), "no-such-secrets")),
		tm("secrets-dir", "open to other users", "--secrets-dir", openDir(file)),
		tm("event-log", "unwritable path", "--event-log", filepath.Join(under, "events.jsonl")),
		tm("leader-grace", "within two heartbeat intervals", "--leader-grace", "1s"),
		tm("leader-grace", "zero", "--leader-grace", "0s"),
		tm("fence-timeout", "negative", "--fence-timeout", "-1s"),
		tm("fence-timeout", "within two heartbeat intervals", "--fence-timeout", "2s"),
		tm("retain-terminal", "zero", "--retain-terminal", "0s"),
		tm("heartbeat-interval", "zero", "--heartbeat-interval", "0s"),
		tm("heartbeat-interval", "negative", "--heartbeat-interval", "-1s"),
		tm("heartbeat-interval", "below the floor", "--heartbeat-interval", "10ms"),
	)
	return rows
}

// validGossipKey is a well-formed gossip key (32 zero bytes).
const validGossipKey = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

func withAlso(r badValue, flag string) badValue { r.also = flag; return r }

// cliMisconfigurations are the operator CLI's invalid values: its --max-message-size holds to
// the processes' range, on a command that reads and one that writes.
var cliMisconfigurations = [][]string{
	{"status", "--max-message-size", "4194303"}, {"status", "--max-message-size", "1073741825"},
	{"job", "list", "--max-message-size", "0"}, {"job", "cancel", "x", "--max-message-size", "-1"},
}

// helpFlags lists the flags `jmnode PROCESS --help` prints.
func helpFlags(t *testing.T, bin, process string) []string {
	t.Helper()
	out, _ := exec.Command(bin, process, "--help").CombinedOutput()
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, m[1])
	}
	if len(flags) < 10 {
		t.Fatalf("jmnode %s --help lists %d flags:\n%s", process, len(flags), out)
	}
	return flags
}

// TestMisconfigurationMatrix: for every flag of `jmnode jobmaster` and `jmnode taskmanager`
// (as their --help lists them), an invalid value — out of range, zero or negative, the wrong
// unit, unparsable, an unwritable path, a missing file — makes the process exit non-zero at
// start with an error naming the flag; and two clusters of real processes, one with every
// flag at its lowest accepted value and one at its highest, run the demo job
// (examples/streaming-checksum.json) with every task RUNNING.
func TestMisconfigurationMatrix(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := buildJmnode(t)
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, []byte("not a directory, a key or a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rows := misconfigurations(file)

	// Every flag of both processes has a row (a flag added without one fails here).
	covered := map[string]bool{}
	for _, r := range rows {
		covered[r.process+" --"+r.flag] = true
	}
	for _, p := range []string{"jobmaster", "taskmanager"} {
		for _, f := range helpFlags(t, bin, p) {
			if !covered[p+" --"+f] {
				t.Errorf("jmnode %s --%s has no invalid value in the matrix", p, f)
			}
			delete(covered, p+" --"+f)
		}
	}
	for k := range covered {
		t.Errorf("the matrix names %s, which --help does not list", k)
	}
	if t.Failed() {
		t.FailNow()
	}

	t.Run("invalid", func(t *testing.T) {
		sem := make(chan struct{}, 4)
		for i, r := range rows {
			t.Run(fmt.Sprintf("%s/%s/%d", r.process, r.flag, i), func(t *testing.T) {
				t.Parallel()
				sem <- struct{}{}
				defer func() { <-sem }()
				ports := testcluster.FreePorts(t, 2)
				args := []string{r.process, "--id", "x1"}
				if r.process == "jobmaster" {
					args = append(args, "--data-dir", t.TempDir(), "--raft-addr", ports[0], "--grpc-addr", ports[1], "--http-addr", "")
				} else {
					args = append(args, "--jm", ports[0], "--grpc-addr", "127.0.0.1:0", "--data-addr", "127.0.0.1:0")
				}
				got := startAndWait(t, bin, append(args, r.args...), 20*time.Second)
				if !got.exited || got.code == 0 {
					t.Fatalf("%s %v (%s): exited %v with code %d, want a non-zero exit at start; output:\n%s", r.process, r.args, r.why, got.exited, got.code, got.stderr)
				}
				// The error is jmnode's last line (a flag the parser refuses also prints the
				// usage, which names every flag: only the error line counts).
				var last string
				for _, l := range strings.Split(got.stderr, "\n") {
					if strings.HasPrefix(l, "jmnode: ") {
						last = l
					}
				}
				if !strings.Contains(last, "-"+r.flag) {
					t.Fatalf("%s %v (%s): the error %q does not name -%s; output:\n%s", r.process, r.args, r.why, last, r.flag, got.stderr)
				}
				if r.also != "" && !strings.Contains(last, r.also) {
					t.Fatalf("%s %v (%s): the error %q does not name %s", r.process, r.args, r.why, last, r.also)
				}
				if strings.Contains(got.stderr, r.process+" started") {
					t.Fatalf("%s %v (%s): started before it refused:\n%s", r.process, r.args, r.why, got.stderr)
				}
				t.Logf("%s (%s): %s", strings.Join(r.args, " "), r.why, last)
			})
		}
	})

	t.Run("cli", func(t *testing.T) {
		addr := testcluster.FreePorts(t, 1)[0] // never dialled: the flag is refused first
		want := fmt.Sprintf("must be in [%d, %d]", transport.MinMaxMessageSize, transport.MaxMaxMessageSize)
		for _, args := range cliMisconfigurations {
			out, err := exec.Command(bin, append(args, "--addr", addr, "--timeout", "1s")...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "jmnode: --max-message-size") || !strings.Contains(string(out), want) {
				t.Errorf("jmnode %v: exit %v, want a refusal of --max-message-size saying %q; output:\n%s", args, err, want, out)
			}
		}
	})

	// The boundaries. Values that are bounds of a relation sit at that bound: the low
	// cluster's TaskManagers heartbeat every 100 ms (jobmaster.MinHeartbeatInterval); its fence
	// timeout is the least above two heartbeat intervals plus the pool query timeout, its TM
	// leader grace the least above the fence timeout plus a pool query, its heartbeat timeout
	// (the redeploy delay) the least the isolation rule accepts, its slot timeout the least
	// above two heartbeat intervals. The highest: heartbeats every 5 s (a deployment waits up to
	// one for the pool's confirmation), the other timings at hours or what they allow. The job
	// size limits are as low as the demo job allows (the lowest accepted, 1, refuses it by
	// design).
	jg, err := LoadJobFile("../../examples/streaming-checksum.json")
	if err != nil {
		t.Fatal(err)
	}
	size := graph.Size(jg)
	hb, pqi, pqt := jobmaster.MinHeartbeatInterval, time.Nanosecond, 500*time.Millisecond
	fence := 2*hb + pqt + time.Millisecond
	grace := fence + pqi + pqt + time.Millisecond
	hbTimeout := jobmaster.RedeployDelayNeeded(fence, hb, pqi, pqt) + time.Millisecond
	ceil := graph.CeilingSizeLimits()
	boundaries := []struct {
		name            string
		slots           int
		jmFlags, tmFlag []string
	}{
		{name: "lowest", slots: transport.MinSlots,
			jmFlags: []string{"--report-deadline", "1ns", "--tm-heartbeat-interval", hb.String(), "--pool-query-interval", pqi.String(),
				"--pool-query-timeout", pqt.String(), "--fence-timeout", fence.String(), "--tm-leader-grace", grace.String(),
				"--heartbeat-timeout", hbTimeout.String(), "--dead-refusals", "1", "--dead-refusal-window", "1ns",
				"--" + graph.LimitExecutions, fmt.Sprint(size.Executions), "--" + graph.LimitInputChannels, fmt.Sprint(size.InputChannels),
				"--" + graph.LimitGraphBytes, fmt.Sprint(size.DeployedBytes), "--retain-jobs", "1", "--retain-job-age", "1ns",
				"--artifact-max-bytes", "1", "--artifact-max-total-bytes", "1", "--artifact-max-count", "1",
				"--max-message-size", fmt.Sprint(transport.MinMaxMessageSize), "--client-write-rate", "1e-9", "--client-write-burst", "1",
				"--slot-timeout", (2*hb + time.Nanosecond).String(), "--cleanup-dead-servers", "0s", "--min-quorum", "1", "--bootstrap-expect", "1",
				"--raft-snapshot-threshold", "1", "--raft-snapshot-interval", "100ms"},
			tmFlag: []string{"--heartbeat-interval", hb.String(), "--fence-timeout", "0s", "--leader-grace", (2*hb + time.Nanosecond).String(),
				"--retain-terminal", "1ns", "--max-message-size", fmt.Sprint(transport.MinMaxMessageSize), "--max-record-size", "16", "--artifact-cache-bytes", "1"}}, // 16: a numeric record, the job's
		{name: "highest", slots: transport.MaxSlots,
			jmFlags: []string{"--report-deadline", "10m", "--tm-heartbeat-interval", "5s", "--pool-query-interval", "1m",
				"--pool-query-timeout", "1m", "--fence-timeout", "10m", "--tm-leader-grace", "8760h", "--heartbeat-timeout", "8760h",
				"--dead-refusals", "1000", "--dead-refusal-window", "1h",
				"--" + graph.LimitExecutions, fmt.Sprint(ceil.MaxExecutions), "--" + graph.LimitInputChannels, fmt.Sprint(ceil.MaxInputChannels),
				"--" + graph.LimitGraphBytes, fmt.Sprint(ceil.MaxGraphBytes), "--retain-jobs", "1000000", "--retain-job-age", "8760h",
				"--artifact-max-bytes", fmt.Sprint(fsm.ArtifactCeilingBytes), "--artifact-max-total-bytes", fmt.Sprint(fsm.ArtifactCeilingTotalBytes), "--artifact-max-count", fmt.Sprint(fsm.ArtifactCeilingCount),
				"--max-message-size", fmt.Sprint(transport.MaxMaxMessageSize), "--client-write-rate", "1e9", "--client-write-burst", "1000000",
				"--slot-timeout", "-1ns", "--cleanup-dead-servers", "8760h", "--min-quorum", "1000",
				"--raft-snapshot-threshold", fmt.Sprint(int64(1) << 40), "--raft-snapshot-interval", "8760h"},
			tmFlag: []string{"--heartbeat-interval", "1m", "--fence-timeout", "10m", "--leader-grace", "8760h",
				"--retain-terminal", "8760h", "--max-message-size", fmt.Sprint(transport.MaxMaxMessageSize),
				"--max-record-size", fmt.Sprint(transport.MaxMaxMessageSize / 4), "--artifact-cache-bytes", "1099511627776"}},
	}
	t.Run("boundaries", func(t *testing.T) {
		for _, b := range boundaries {
			t.Run(b.name, func(t *testing.T) { // one at a time: each picks its free ports
				cdir := t.TempDir()
				nodes, err := proccluster.Local(cdir, proccluster.LocalOptions{JMs: 1, TMs: 3, Slots: b.slots,
					JMFlags: append([]string{"--gossip-profile", "local", "--fast-raft"}, b.jmFlags...),
					TMFlags: append([]string{"--gossip-profile", "local"}, b.tmFlag...)})
				if err != nil {
					t.Fatal(err)
				}
				d := startProcessCluster(t, cdir, bin, nodes)
				ctx := context.Background()
				leader, err := d.waitLeader(ctx, "", 60*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if err := d.waitTMs(ctx, 60*time.Second, 3, int32(b.slots)); err != nil {
					t.Fatal(err)
				}
				job := proto.Clone(jg).(*pb.JobGraph)
				job.JobId = newJobID()
				c := d.client(leader.LeaderGrpcAddress)
				defer c.cc.Close()
				if err := c.call(15*time.Second, func(ctx context.Context) error {
					_, err := c.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: job})
					return err
				}); err != nil {
					t.Fatalf("submit the demo job: %v", err)
				}
				rec, err := d.waitAllRunning(ctx, job.JobId, 60*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				var tms []string
				for _, a := range testcluster.Attempts(rec) {
					tms = append(tms, a.TM)
				}
				sort.Strings(tms)
				t.Logf("%s: the demo job runs every task (%d, on %v)", b.name, len(tms), tms)
			})
		}
	})
}

// TestEveryCommandAnswersHelp walks jmnode's command table (the one run dispatches through):
// `jmnode PATH --help` exits 0 with a usage text for every group and every command, and the
// top-level usage names every top-level command.
func TestEveryCommandAnswersHelp(t *testing.T) {
	t.Parallel()
	bin := buildJmnode(t)
	var walk func(path []string, c *command)
	n := 0
	walk = func(path []string, c *command) {
		args := append(append([]string(nil), path...), "--help")
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("jmnode %s: %v\n%s", strings.Join(args, " "), err, out)
		} else if !strings.Contains(string(out), "usage") {
			t.Errorf("jmnode %s: no usage text:\n%s", strings.Join(args, " "), out)
		}
		n++
		for _, s := range c.subs {
			walk(append(append([]string(nil), path...), s.name), s)
		}
	}
	root := commandTree()
	walk(nil, root)
	for _, s := range root.subs {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(s.name) + `\b`).MatchString(usage) {
			t.Errorf("the usage text does not list %q", s.name)
		}
	}
	t.Logf("%d commands and groups answer --help", n)
}
