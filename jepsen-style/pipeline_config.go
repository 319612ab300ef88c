package jepsen

import (
	"flag"
	"time"
)

// PipelineConfig is the pipeline workload's part of a run's Config.
type PipelineConfig struct {
	// Off runs without the workload (quicker runs); it is on by default.
	Off bool
	// NatsServer is the nats-server program ("": beside jmnode, else on PATH).
	NatsServer string
	// AimTMFaults makes kill-tm and restart-tm pick among the TMs that run a task of the
	// pipeline job (every TM when none is known), so that each restores the pipeline's region.
	// Where the pipeline's tasks land depends on when each TM registered, so without it a seed
	// may kill a TM the pipeline does not use.
	AimTMFaults bool
	// StallWait ends the wait for the sinks once nothing they hold has changed for this long
	// (0: wait until they hold every window, up to PipelineWait). The self-test sets it: its
	// broken builds are caught by what the sinks hold, and a window that never comes would
	// otherwise cost the whole wait.
	StallWait time.Duration
}

// PipelineFlags adds the workload's flags to a command's flag set.
func PipelineFlags(fs *flag.FlagSet, cfg *Config) {
	fs.BoolVar(&cfg.Pipeline.Off, "no-pipeline", false, "run without the pipeline workload (NATS JetStream -> window -> WebAssembly -> PostgreSQL and JetStream, checked at the end)")
	fs.BoolVar(&cfg.Pipeline.AimTMFaults, "aim-tm-faults-at-pipeline", false, "kill-tm and restart-tm kill a TM that runs a task of the pipeline job (as the self-test's records-path builds do)")
	fs.DurationVar(&cfg.Pipeline.StallWait, "pipeline-stall-wait", 0, "end the wait for the pipeline's sinks once nothing they hold changed for this long (0: wait for every window, up to 90s; the self-test uses 20s)")
	fs.StringVar(&cfg.Pipeline.NatsServer, "nats-server", "", "the nats-server of the pipeline workload (default: beside jmnode, else on PATH; make bin/nats-server builds it)")
}
