package jepsen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// Errors of a run.
var (
	// ErrUnsupported: the scenario needs something this machine lacks. No scenario does today
	// (delay and loss are made in user space where the kernel has no sch_netem); the matrix
	// still reports such a run apart from failures.
	ErrUnsupported = errors.New("jepsen: scenario not supported here")
	// ErrNotReady: the cluster or the streaming job did not come up.
	ErrNotReady = errors.New("jepsen: cluster not ready")
	// ErrInvalid: a checker failed.
	ErrInvalid = errors.New("jepsen: run invalid")
)

// Config describes one run.
type Config struct {
	Scenario string
	Seed     int64
	// Duration of the fault phase; faults start after Warmup and end by Duration.
	Duration time.Duration
	Warmup   time.Duration
	// Settle, when set, ends the fault phase this long after the last scheduled fault heals,
	// when that comes before Duration (the schedule is still drawn for Duration, so a seed
	// keeps its faults). The self-test sets it: its runs need the faults, not the time after.
	Settle time.Duration
	// Quiet is the time after heal-all during which clients keep running before the final phase.
	Quiet time.Duration
	// Grace bounds the wait for the streaming job to be RUNNING after heal.
	Grace time.Duration
	// ReportDeadline is passed to the JMs (--report-deadline).
	ReportDeadline time.Duration
	JMNode         string // path of the jmnode binary
	RunsDir        string // runs/<runid>/ is created inside
	RunID          string // generated when empty
	// Failpoints is set in every jmnode's environment as JMNODE_FAILPOINTS (the syntax of
	// failpoint.Parse): a deliberately broken build, or pauses between commits and RPCs.
	Failpoints string
	Clients    int
	// TLS runs every process with mutual TLS and encrypted gossip (credentials made by the
	// harness), and the clients with an operator certificate.
	TLS bool
	// JobRate is the records per second of the clients' bounded jobs (0: 20, a couple of
	// seconds each); 5 makes them run 2-10 s, so some are still running when a new leader
	// collects its reports.
	JobRate int64
	// Pipeline is the pipeline workload's settings (pipeline_config.go).
	Pipeline PipelineConfig
	// Progress receives one line per step; nil means silent.
	Progress func(format string, args ...any)
}

// DefaultConfig returns the settings of `jepsen run` without flags.
func DefaultConfig() Config {
	return Config{Duration: 60 * time.Second, Warmup: 5 * time.Second, Quiet: 10 * time.Second,
		Grace: 30 * time.Second, ReportDeadline: 10 * time.Second, JMNode: "./bin/jmnode", RunsDir: "runs", Clients: 3}
}

// Validate checks the config and fills in defaults for zero values.
func (c *Config) Validate() error {
	def := DefaultConfig()
	if c.Duration <= 0 {
		c.Duration = def.Duration
	}
	if c.Warmup <= 0 {
		c.Warmup = def.Warmup
	}
	if c.Quiet <= 0 {
		c.Quiet = def.Quiet
	}
	if c.Grace <= 0 {
		c.Grace = def.Grace
	}
	if c.ReportDeadline <= 0 {
		c.ReportDeadline = def.ReportDeadline
	}
	if c.RunsDir == "" {
		c.RunsDir = def.RunsDir
	}
	if c.Clients <= 0 {
		c.Clients = def.Clients
	}
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
	if _, err := LookupScenario(c.Scenario); err != nil {
		return err
	}
	fp, err := failpoint.Parse(c.Failpoints)
	if err != nil {
		return fmt.Errorf("jepsen: --failpoints: %w", err)
	}
	c.Failpoints = fp.String()
	path, err := filepath.Abs(c.JMNode)
	if err != nil {
		return err
	}
	if st, err := os.Stat(path); err != nil || st.IsDir() {
		return fmt.Errorf("jepsen: jmnode binary %s not found (build it: make build)", path)
	}
	c.JMNode = path
	if c.RunID == "" {
		c.RunID = fmt.Sprintf("%s-s%d-%s", shortName(c.Scenario), c.Seed, time.Now().Format("150405"))
	}
	return nil
}

// shortName keeps run ids short: the scenario name cut to 12 characters.
func shortName(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
