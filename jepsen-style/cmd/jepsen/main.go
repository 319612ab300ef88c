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
	"strconv"
	"strings"
	"syscall"
	"time"

	jepsen "github.com/jmcluster/jmcluster/jepsen-style"
	"github.com/jmcluster/jmcluster/jepsen-style/netns"
)

const usage = `usage: jepsen <command> [flags]

commands:
  run        one scenario with one seed
  matrix     every scenario (or --scenarios) with every seed of --seeds
  short      kill-leader, pause-leader, isolate-leader, majority-minority; seed 1; under 5 minutes
  selftest   deliberately broken builds, each of which its checker must catch (kill-leader, seed 1)
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
	fs.DurationVar(&cfg.Quiet, "quiet", cfg.Quiet, "quiet period after heal-all, clients still running")
	fs.DurationVar(&cfg.Grace, "grace", cfg.Grace, "the streaming job must be RUNNING this long after heal")
	fs.DurationVar(&cfg.ReportDeadline, "report-deadline", cfg.ReportDeadline, "--report-deadline passed to the JMs")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent client processes")
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

// brokenBuild is a deliberately broken jmnode and the checkers that must catch it: at least
// one of anyOf must fail (timing decides which of several possible symptoms shows first).
type brokenBuild struct {
	failpoints string
	anyOf      []string
	why        string
}

var brokenBuilds = []brokenBuild{
	{"restart-on-failover", []string{"restarts"}, "a new leader restarts every task instead of reconciling"},
	{"restart-on-failover", []string{"sink-continuity"}, "restarted sinks and sources break the sink's sequence"},
	{"ack-before-commit", []string{"linearizable", "no-lost-submissions"}, "submissions acknowledged before they commit"},
	{"nondeterministic-apply", []string{"state-hash"}, "Apply reads the replica's own clock"},
	{"stuck-reconciling", []string{"running-after-heal"}, "reconciliation never commits; the job stays RECONCILING"},
}

// selftestCmd runs each broken build once and fails unless the checker that claims to catch
// it does.
func selftestCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("selftest", flag.ExitOnError)
	cfg := common(fs)
	cfg.Duration, cfg.Quiet, cfg.Grace = 20*time.Second, 5*time.Second, 15*time.Second
	_ = fs.Parse(args)
	runs := map[string]map[string]string{} // failpoints -> checker -> verdict
	missed := 0
	for _, b := range brokenBuilds {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		verdicts, ok := runs[b.failpoints]
		if !ok {
			c := *cfg
			c.Scenario, c.Seed, c.RunID, c.Failpoints = "kill-leader", 1, "", b.failpoints
			progress("selftest: broken build %q (%s)", b.failpoints, b.why)
			rep, err := jepsen.Run(ctx, c)
			if err != nil && !errors.Is(err, jepsen.ErrInvalid) {
				return fmt.Errorf("selftest %s: %w", b.failpoints, err)
			}
			verdicts = map[string]string{}
			if rep != nil {
				for _, r := range rep.Checkers {
					verdicts[r.Name] = string(r.Verdict)
				}
			}
			runs[b.failpoints] = verdicts
		}
		caught := ""
		for _, name := range b.anyOf {
			if verdicts[name] == "fail" {
				caught = name
			}
		}
		if caught == "" {
			missed++
			progress("selftest: MISSED %q: none of %v failed (%v)", b.failpoints, b.anyOf, verdicts)
			continue
		}
		progress("selftest: %-20s caught by %s", b.failpoints, caught)
	}
	if missed > 0 {
		return fmt.Errorf("%d broken builds were not caught", missed)
	}
	progress("selftest: every broken build was caught by its checker")
	return nil
}
