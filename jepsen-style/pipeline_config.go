package jepsen

import "flag"

// PipelineConfig is the pipeline workload's part of a run's Config.
type PipelineConfig struct {
	// Off runs without the workload (quicker runs); it is on by default.
	Off bool
	// NatsServer is the nats-server program ("": beside jmnode, else on PATH).
	NatsServer string
}

// PipelineFlags adds the workload's flags to a command's flag set.
func PipelineFlags(fs *flag.FlagSet, cfg *Config) {
	fs.BoolVar(&cfg.Pipeline.Off, "no-pipeline", false, "run without the pipeline workload (NATS JetStream -> window -> WebAssembly -> PostgreSQL and JetStream, checked at the end)")
	fs.StringVar(&cfg.Pipeline.NatsServer, "nats-server", "", "the nats-server of the pipeline workload (default: beside jmnode, else on PATH; make bin/nats-server builds it)")
}
