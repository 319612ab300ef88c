// Command jepsen runs jmcluster under a nemesis: real jmnode processes in network namespaces,
// clients recording a history, faults from a seeded schedule, checkers and a report per run.
//
//	jepsen run --scenario kill-leader --seed 1 --duration 60s --jmnode ./bin/jmnode
//	jepsen matrix [--seeds 1,2,3] [--scenarios a,b]
//	jepsen short
//	jepsen clean
//	jepsen scenarios
//
// Everything but `scenarios` needs root (network namespaces, iptables, tc).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	jepsen "github.com/jmcluster/jmcluster/jepsen-style"
	"github.com/jmcluster/jmcluster/jepsen-style/netns"
)

const usage = `usage: jepsen <command> [flags]

commands:
  run        one scenario with one seed
  matrix     every scenario (or --scenarios) with every seed of --seeds
  short      kill-leader, pause-leader, isolate-leader, majority-minority; seed 1; under 5 minutes
  selftest   every planted bug of the failpoint table, each in its scenario, must be caught by its checker
  clean      kill every leftover process and delete every jmc-* network namespace
  scenarios  list the fault matrix
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, args := os.Args[1], os.Args[2:]
	if cmd == "scenarios" {
		for _, s := range jepsen.Scenarios() {
			fmt.Printf("%-18s %s\n", s.Name, s.Description)
		}
		return
	}
	if cmd == "-h" || cmd == "--help" || cmd == "help" {
		fmt.Print(usage)
		return
	}
	if os.Geteuid() != 0 {
		fmt.Fprintf(os.Stderr, "jepsen %s needs root: it creates network namespaces, veth pairs, iptables rules and netfilter queues (inside its own namespaces only). Run it as root, e.g. sudo make jepsen-short.\n", cmd)
		os.Exit(2)
	}
	var err error
	switch cmd {
	case "run":
		err = runCmd(ctx, args)
	case "matrix":
		err = matrixCmd(ctx, args, false)
	case "short":
		err = matrixCmd(ctx, args, true)
	case "selftest":
		err = selftestCmd(ctx, args)
	case "clean":
		err = netns.Clean(context.Background(), "")
		if err == nil {
			progress("clean: no jmc-* namespace or marked process left")
		}
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Printf("%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// common registers the flags shared by run, matrix and short.
func common(fs *flag.FlagSet) *jepsen.Config {
	cfg := jepsen.DefaultConfig()
	fs.StringVar(&cfg.JMNode, "jmnode", cfg.JMNode, "path of the jmnode binary")
	fs.StringVar(&cfg.RunsDir, "runs-dir", cfg.RunsDir, "directory receiving runs/<runid>/")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "fault phase length")
	fs.DurationVar(&cfg.Settle, "settle", cfg.Settle, "end the fault phase this long after the last fault heals, when sooner than --duration (0: the whole duration; the self-test uses 4s)")
	fs.DurationVar(&cfg.Quiet, "quiet", cfg.Quiet, "quiet period after heal-all, clients still running")
	fs.DurationVar(&cfg.Grace, "grace", cfg.Grace, "the streaming job must be RUNNING this long after heal")
	fs.DurationVar(&cfg.ReportDeadline, "report-deadline", cfg.ReportDeadline, "--report-deadline passed to the JMs")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent client processes")
	fs.Int64Var(&cfg.JobRate, "job-rate", 0, "records per second of the clients' bounded jobs (default 20: 0.5-2.5 s each; 5: 2-10 s, still running when a new leader collects its reports)")
	fs.BoolVar(&cfg.TLS, "tls", false, "mutual TLS on every connection and encrypted gossip, with a CA, certificates and a gossip key the harness makes in <run>/tls")
	jepsen.PipelineFlags(fs, &cfg)
	fs.StringVar(&cfg.Failpoints, "failpoints", "", "JMNODE_FAILPOINTS for every jmnode, e.g. early-gate or pause(before-submit-task)=2s (jmnode failpoints lists them)")
	cfg.Progress = progress
	return &cfg
}

func runCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	cfg := common(fs)
	fs.StringVar(&cfg.Scenario, "scenario", "kill-leader", "scenario name (jepsen scenarios)")
	fs.Int64Var(&cfg.Seed, "seed", 1, "schedule and workload seed")
	fs.StringVar(&cfg.RunID, "run-id", "", "run id (default: scenario-seed-time)")
	_ = fs.Parse(args)
	_, err := jepsen.Run(ctx, *cfg)
	return err
}

type outcome struct {
	Scenario string `json:"scenario"`
	Seed     int64  `json:"seed"`
	RunID    string `json:"run_id"`
	Result   string `json:"result"` // valid, INVALID, unsupported, error
	Error    string `json:"error,omitempty"`
}

func matrixCmd(ctx context.Context, args []string, short bool) error {
	fs := flag.NewFlagSet("matrix", flag.ExitOnError)
	cfg := common(fs)
	seeds, scenarios := "1,2,3", ""
	if short {
		seeds, cfg.Duration, cfg.Quiet = "1", 30*time.Second, 6*time.Second
		scenarios = strings.Join(jepsen.ShortScenarios(), ",")
	}
	fs.StringVar(&seeds, "seeds", seeds, "comma list of seeds")
	fs.StringVar(&scenarios, "scenarios", scenarios, "comma list of scenarios (default: all)")
	_ = fs.Parse(args)
	var names []string
	if scenarios == "" {
		for _, s := range jepsen.Scenarios() {
			names = append(names, s.Name)
		}
	} else {
		names = strings.Split(scenarios, ",")
	}
	var seedList []int64
	for _, s := range strings.Split(seeds, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return fmt.Errorf("bad seed %q", s)
		}
		seedList = append(seedList, n)
	}
	started := time.Now()
	var results []outcome
	failed := 0
	for _, name := range names {
		for _, seed := range seedList {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c := *cfg
			c.Scenario, c.Seed, c.RunID = name, seed, ""
			rep, err := jepsen.Run(ctx, c)
			o := outcome{Scenario: name, Seed: seed, Result: "valid"}
			if rep != nil {
				o.RunID = rep.RunID
			}
			switch {
			case err == nil:
			case errors.Is(err, jepsen.ErrUnsupported):
				o.Result, o.Error = "unsupported", err.Error()
			case errors.Is(err, jepsen.ErrInvalid) && expectedInvalid(name) != "":
				o.Result, o.Error = "invalid-by-design", err.Error()+" (expected: "+expectedInvalid(name)+")"
			case errors.Is(err, jepsen.ErrInvalid):
				o.Result, o.Error = "INVALID", err.Error()
				failed++
			default:
				o.Result, o.Error = "error", err.Error()
				failed++
			}
			progress("=> %s seed %d: %s %s", name, seed, o.Result, o.Error)
			results = append(results, o)
		}
	}
	progress("summary after %s:", time.Since(started).Round(time.Second))
	for _, o := range results {
		fmt.Printf("  %-18s seed %-4d %-11s %s\n", o.Scenario, o.Seed, o.Result, o.RunID)
	}
	if err := os.MkdirAll(cfg.RunsDir, 0o755); err == nil {
		path := filepath.Join(cfg.RunsDir, "matrix-"+time.Now().Format("20060102-150405")+".json")
		if err := jepsen.WriteSummary(path, results); err == nil {
			progress("summary written to %s", path)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d runs failed", failed, len(results))
	}
	return nil
}

// brokenBuild is a deliberately broken jmnode and the checkers that must catch it: the planted
// switch, the hooks that widen the window it breaks, the scenario and seed that exercise it;
// at least one of anyOf must fail (timing decides which of several possible symptoms shows
// first). Rows with the same failpoints, scenario and seed share one run.
type brokenBuild struct {
	bug      string // the switch (a row of internal/failpoint/table.go)
	hooks    string // extra JMNODE_FAILPOINTS terms, "" for none
	scenario string
	seed     int64
	jobRate  int64 // records per second of the clients' bounded jobs; 0: the default
	anyOf    []string
	why      string
}

// pipeline says whether the build's run needs the pipeline workload: only the pipeline
// checkers read it, and a run without it starts quicker and loads the machine less.
func (b brokenBuild) pipeline() bool {
	for _, name := range b.anyOf {
		if strings.HasPrefix(name, "pipeline-") {
			return true
		}
	}
	return false
}

func (b brokenBuild) failpoints() string {
	if b.hooks == "" {
		return b.bug
	}
	return b.bug + "," + b.hooks
}

var brokenBuilds = []brokenBuild{
	{"restart-on-failover", "", "kill-leader", 1, 0, []string{"restarts"}, "a new leader restarts every task instead of reconciling"},
	{"restart-on-failover", "", "kill-leader", 1, 0, []string{"sink-continuity"}, "a restarted sink's committed document names a second attempt (it restored the latest completed checkpoint)"},
	{"ack-before-commit", "", "kill-leader", 1, 0, []string{"linearizable", "no-lost-submissions"}, "submissions acknowledged before they commit"},
	{"nondeterministic-apply", "", "kill-leader", 1, 0, []string{"state-hash"}, "Apply reads the replica's own clock"},
	{"stuck-reconciling", "", "kill-leader", 1, 0, []string{"running-after-heal"}, "reconciliation never commits; the job stays RECONCILING"},
	{"early-gate", "pause(before-reconcile-commit)=3s", "kill-leader", 1, 5, []string{"stopped-tasks-ended"},
		"a task that finishes while the new leader reconciles is applied FINISHED, then the reconciled graph built from its RUNNING report overwrites it"},
	{"disable-fencing", "pause(before-submit-task)=2s,pause(before-leader-stop)=1s", "pause-leader", 1, 0, []string{"no-concurrent-attempts"},
		"the stopped leader's delayed SubmitTasks reach TMs that follow its successor, and they start the tasks"},
	{"outbox-double-worker", "pause(outbox-after-send)=2s", "kill-leader", 1, 0, []string{"updates-in-order"},
		"a second sender starts for an attempt whose first is pausing after a send; both deliver its terminal state once the new leader serves"},
	{"no-incarnation", "", "restart-tm", 1, 0, []string{"restart-detected"},
		"a TM started again before the leader proved it dead is taken for the process that died: its lost attempts stay RUNNING until the new process's deployment reports show them missing"},
	{"commit-before-complete", "", "kill-leader", 1, 0, []string{"committed-exactly-once"},
		"every sink writes its document at the barrier, milliseconds before the leader stamps the checkpoint's completion (or never, when the checkpoint is aborted)"},
	{"complete-twice", "", "kill-leader", 1, 0, []string{"checkpoint-ids"},
		"every checkpoint is completed twice: listed twice in the record and counted twice, so the counts exceed the ids triggered"},
	{"skip-store-verify", "", "corrupt-raft-log", 1, 0, []string{"store-damage", "state-hash"},
		"a JM started on a damaged raft.db without verifying it: it crashes on what it reads (a panic, a memory fault past the truncated file's end) instead of refusing with the file named, or serves entries whose bytes changed"},
	// A damaged checkpoint: the seed's damage is a bit flip in a digit of the source's state.
	{"restore-unverified", "", "corrupt-checkpoint", 1, 0, []string{"committed-exactly-once"},
		"the restore reads the damaged state without its checksum: the source resumes at a position one bit away, and its region's sink commits a duplicate or a gap"},
	{"starved-leader-fences", "", "throttle-leader", 1, 0, []string{"starved-leader-hands-over"},
		"the leader throttled to 5-10 % of a core keeps leading through the fault: clients and TaskManagers wait on it"},
	{"removed-rejoins", "", "membership-change", 1, 0, []string{"membership"},
		"the removed JM, knowing no leader once its cut heals, asks its --join addresses to add it again, and the leader does"},
	// The planted bugs of the records' path, caught on the pipeline workload (JetStream, key
	// by, window, wasm, PostgreSQL and JetStream sinks) after a TaskManager's tasks restore.
	{"window-state-unchecked", "", "kill-tm", 10, 0, []string{"pipeline-table", "pipeline-stream"},
		"a restored window holds none of the windows open at its checkpoint: their rows count only the clicks after it"},
	{"postgres-commit-at-barrier", "pause(before-complete-checkpoint)=2s", "restart-tm", 63, 0, []string{"pipeline-table"},
		"the sink commits at the barrier; a TM killed while the checkpoint waits for its completion (held 2 s) restores the previous one, and the replay writes the rows again"},
	{"wasm-state-lost", "", "restart-tm", 63, 0, []string{"pipeline-table", "pipeline-stream"},
		"each snapshot of the wasm function's keyed state is the one its task opened with: a restore loses every ordinal since, and a user's ordinals start again"},
	{"watermark-regress", "", "restart-tm", 63, 0, []string{"pipeline-table", "pipeline-stream"},
		"a restored window task has no watermark until its inputs' first: the late clicks it replays meanwhile are counted, and their window (ten seconds before the first click) fires"},
}

// notCaught are the planted bugs no scenario of the suite can expose, each with the reason;
// every self-test prints them. Keep it empty but for a reason stated in docs/testing.md.
var notCaught = map[string]string{}

// plantedBugs are the switches of the failpoint table that break a safety mechanism (every
// switch but the injected faults).
func plantedBugs() []string {
	var out []string
	for _, p := range failpoint.List() {
		if p.Kind == failpoint.KindSwitch && !p.Fault {
			out = append(out, p.Name)
		}
	}
	return out
}

// uncovered lists the planted bugs no row of builds names.
func uncovered(builds []brokenBuild) []string {
	have := map[string]bool{}
	for _, b := range builds {
		have[b.bug] = true
	}
	for name := range notCaught {
		have[name] = true
	}
	var out []string
	for _, name := range plantedBugs() {
		if !have[name] {
			out = append(out, name)
		}
	}
	return out
}

// selftestCmd runs each broken build once and fails unless the checker that claims to catch
// it does, and unless every planted bug of the failpoint table has a row.
func selftestCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("selftest", flag.ExitOnError)
	cfg := common(fs)
	cfg.Duration, cfg.Settle, cfg.Quiet, cfg.Grace = 20*time.Second, 4*time.Second, 5*time.Second, 15*time.Second
	only := fs.String("only", "", "comma-separated planted bugs to run (default: all, and every one must have a row)")
	_ = fs.Parse(args)
	builds := brokenBuilds
	if *only != "" {
		want := map[string]bool{}
		for _, n := range strings.Split(*only, ",") {
			want[strings.TrimSpace(n)] = true
		}
		builds = nil
		matched := map[string]bool{}
		for _, b := range brokenBuilds {
			if want[b.bug] {
				builds = append(builds, b)
				matched[b.bug] = true
			}
		}
		for name := range matched {
			delete(want, name)
		}
		if len(want) > 0 {
			return fmt.Errorf("selftest --only: no broken build for %v (planted bugs: %v)", sortedKeys(want), plantedBugs())
		}
	} else if missing := uncovered(builds); len(missing) > 0 {
		return fmt.Errorf("selftest: planted bugs without a broken build: %v (every switch of internal/failpoint/table.go but the injected faults needs a row)", missing)
	}
	for _, name := range sortedKeys(boolKeys(notCaught)) {
		progress("selftest: %-22s NOT CAUGHT by any scenario: %s", name, notCaught[name])
	}
	start := time.Now()
	type runKey struct {
		failpoints, scenario string
		seed, jobRate        int64
		pipeline             bool
	}
	runs := map[runKey]map[string]string{} // run -> checker -> verdict
	var missed []string
	for _, b := range builds {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		k := runKey{b.failpoints(), b.scenario, b.seed, b.jobRate, b.pipeline()}
		verdicts, ok := runs[k]
		if !ok {
			c := *cfg
			c.Scenario, c.Seed, c.RunID, c.Failpoints, c.JobRate = b.scenario, b.seed, "", b.failpoints(), b.jobRate
			c.Pipeline.Off = c.Pipeline.Off || !b.pipeline()
			c.Pipeline.AimTMFaults = b.pipeline()
			c.Pipeline.StallWait = 20 * time.Second
			progress("selftest: broken build %q, %s seed %d (%s)", b.failpoints(), b.scenario, b.seed, b.why)
			rep, err := jepsen.Run(ctx, c)
			if err != nil && !errors.Is(err, jepsen.ErrInvalid) {
				return fmt.Errorf("selftest %s: %w", b.failpoints(), err)
			}
			verdicts = map[string]string{}
			if rep != nil {
				for _, r := range rep.Checkers {
					verdicts[r.Name] = string(r.Verdict)
				}
			}
			runs[k] = verdicts
		}
		caught := ""
		for _, name := range b.anyOf {
			if verdicts[name] == "fail" {
				caught = name
			}
		}
		if caught == "" {
			missed = append(missed, b.bug)
			progress("selftest: MISSED %q: none of %v failed (%v)", b.bug, b.anyOf, verdicts)
			continue
		}
		progress("selftest: %-22s caught by %s (%s seed %d)", b.bug, caught, b.scenario, b.seed)
	}
	progress("selftest: %d runs in %s", len(runs), time.Since(start).Round(time.Second))
	if len(missed) > 0 {
		return fmt.Errorf("%d broken builds were not caught: %s (their runs' lines start \"selftest: MISSED\"; the reports are under the runs directory)",
			len(missed), strings.Join(missed, ", "))
	}
	progress("selftest: every broken build was caught by its checker")
	return nil
}

func boolKeys(m map[string]string) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
