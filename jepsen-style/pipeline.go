package jepsen

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jmcluster/jmcluster/internal/pgserver"
	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/jepsen-style/client"
	"github.com/jmcluster/jmcluster/jepsen-style/netns"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The pipeline workload (DESIGN.md, "The pipeline workload"): click events published to
// JetStream for the whole run, the job JetStream -> key by user -> 2 s tumbling window -> a
// WebAssembly function numbering each user's windows in its keyed state -> a PostgreSQL
// table and a JetStream stream, checkpointed every second; at the end the table and the
// stream are compared with what the server acknowledged.
const (
	PipelineWindow     = 2 * time.Second
	PipelineOutOfOrder = 500 * time.Millisecond
	PipelineRate       = 50 // clicks per second
	// PipelineLateEvery: once a window result is committed, every 20th click is followed by a
	// late one (client.Publisher), which only a window task that lost its watermark counts.
	PipelineLateEvery    = 20
	PipelineUsers        = 8
	PipelineParallelism  = 2
	PipelineWasm         = "ordinal.wasm" // beside jmnode (make wasm-examples)
	PipelineWait         = 90 * time.Second
	pipelineDB           = "pipeline"
	pipelineTable        = "pipeline_windows"
	pipelineClicksStream = "CLICKS"
	pipelineOutStream    = "PIPE_OUT"
	// pipelineDeadLetters is the job's dead-letter file sink, in each TM's work dir.
	pipelineDeadLetters = "pipeline-dead-letters-{job}-{subtask}.jsonl"
)

// pipeline is the workload's state in one run.
type pipeline struct {
	dir     string
	ns      string
	nats    *natsServer
	pg      *pgserver.Server
	jobID   string
	pub     *client.Publisher
	pubFile *os.File
	stopPub context.CancelFunc
	pubWG   sync.WaitGroup
	results []checker.Result
}

// startPipeline starts the servers, submits the pipeline job and starts publishing; nothing
// when the run has the workload off.
func (r *run) startPipeline(ctx context.Context) error {
	if r.cfg.Pipeline.Off {
		return nil
	}
	p := r.cfg.Progress
	start := time.Now()
	pl := &pipeline{dir: filepath.Join(r.dir, "pipeline"), ns: r.topo.BridgeNS(), jobID: fmt.Sprintf("%032x", uint64(r.cfg.Seed)+2)}
	r.pipe = pl
	if err := os.MkdirAll(pl.dir, 0o755); err != nil {
		return err
	}
	natsBin, err := findNatsServer(r.cfg.Pipeline.NatsServer, r.cfg.JMNode)
	if err != nil {
		return err
	}
	wasm, err := os.ReadFile(filepath.Join(filepath.Dir(r.cfg.JMNode), PipelineWasm))
	if err != nil {
		return fmt.Errorf("jepsen: the pipeline's user function: %w (make wasm-examples builds it beside jmnode)", err)
	}
	if _, err := netns.IP(ctx, "-n", pl.ns, "addr", "add", PipelineIP+"/24", "dev", netns.BridgeDevice); err != nil {
		return fmt.Errorf("jepsen: address %s on the bridge: %w", PipelineIP, err)
	}
	if pl.nats, err = startNats(ctx, natsBin, pl.ns, pl.dir); err != nil {
		return err
	}
	for stream, subjects := range map[string]string{pipelineClicksStream: "clicks.>", pipelineOutStream: "windows.>"} {
		if err := pl.nats.createStream(ctx, stream, subjects); err != nil {
			return err
		}
	}
	if pl.pg, err = startPostgres(ctx, pl.ns, pl.dir); err != nil {
		return err
	}
	p("pipeline: nats-server %s (streams %s, %s) and PostgreSQL %s:%d (table %s) in %s, plaintext on the bridge, in %s",
		pl.nats.url, pipelineClicksStream, pipelineOutStream, PipelineIP, PipelinePGPort, pipelineTable, pl.ns, time.Since(start).Round(time.Millisecond))
	sha, err := r.uploadArtifact(ctx, wasm)
	if err != nil {
		return err
	}
	jg, err := pipelineJob(pl.jobID, pl.nats.url, pl.pg.URL(pipelineDB, pipelineDB), sha)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := client.SubmitUntil(sctx, r.pool, jg); err != nil {
		return fmt.Errorf("%w: submit the pipeline job: %v", ErrNotReady, err)
	}
	for {
		_, fr := client.ConsistentRead(sctx, r.pool, pl.jobID)
		if fr.Status == "JOB_STATUS_RUNNING" {
			break
		}
		if sctx.Err() != nil {
			return fmt.Errorf("%w: the pipeline job not RUNNING after 60s (last %q %s)", ErrNotReady, fr.Status, fr.Err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if pl.pubFile, err = os.Create(filepath.Join(pl.dir, "published.jsonl")); err != nil {
		return err
	}
	pl.pub = client.NewPublisher(pl.nats.js, client.PublisherConfig{Seed: r.cfg.Seed, Rate: PipelineRate, Users: PipelineUsers,
		Subject: "clicks", Record: pl.pubFile, LateEvery: PipelineLateEvery})
	pctx, stop := context.WithCancel(context.Background())
	pl.stopPub = stop
	pl.pubWG.Add(2)
	go func() { defer pl.pubWG.Done(); pl.pub.Run(pctx) }()
	go func() { defer pl.pubWG.Done(); pl.lateAfterFirstRow(pctx, p) }()
	p("pipeline: job %s RUNNING (module %s); publishing %d clicks/s of %d users; ready in %s", pl.jobID, sha[:12],
		PipelineRate, PipelineUsers, time.Since(start).Round(time.Millisecond))
	return nil
}

// uploadArtifact stores the module through any JM.
func (r *run) uploadArtifact(ctx context.Context, b []byte) (string, error) {
	sum := sha256.Sum256(b)
	sha := hex.EncodeToString(sum[:])
	var last error
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		node := r.pool.Nodes()[i%len(r.pool.Nodes())]
		uctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := r.pool.PutArtifact(uctx, node, sha, b)
		cancel()
		if err == nil {
			return sha, nil
		}
		last = err
		time.Sleep(300 * time.Millisecond)
	}
	return "", fmt.Errorf("%w: upload the pipeline's module: %v", ErrNotReady, last)
}

// stopPipeline ends the publisher and the servers (Run's deferred clean of the namespaces
// kills whatever is left in them).
func (r *run) stopPipeline() {
	pl := r.pipe
	if pl == nil {
		return
	}
	if pl.stopPub != nil {
		pl.stopPub()
		pl.pubWG.Wait()
	}
	if pl.pubFile != nil {
		_ = pl.pubFile.Close()
	}
	if pl.pg != nil {
		_ = pl.pg.Stop()
	}
	if pl.nats != nil {
		pl.nats.stop()
	}
}

// pipelineResults are the pipeline checkers' verdicts (none when the workload is off).
func (r *run) pipelineResults() []checker.Result {
	if r.pipe == nil {
		return nil
	}
	return r.pipe.results
}

// pipelineJob is the workload's job graph.
func pipelineJob(id, natsURL, pgURL, sha string) (*pb.JobGraph, error) {
	spec := fmt.Sprintf(`{
  "job_id": %q, "name": "jepsen-pipeline", "type": "JOB_TYPE_STREAMING",
  "vertices": [
    {"id": "clicks", "name": "clicks", "parallelism": %[5]d, "operator": {
       "nats_source": {"url": %[2]q, "stream": %[6]q, "subject": "clicks.>"},
       "event_time": {"time_path": "ts", "max_out_of_orderness_ms": "%[7]d", "watermark_interval_ms": "200"}}},
    {"id": "by-user", "name": "by-user", "parallelism": %[5]d, "operator": {"json_key_by": {"path": "user"}}},
    {"id": "windows", "name": "windows", "parallelism": %[5]d, "operator": {
       "window": {"kind": "WINDOW_KIND_TUMBLING", "size_ms": "%[8]d", "field": "amount"}}},
    {"id": "number", "name": "number", "parallelism": %[5]d, "operator": {
       "wasm": {"artifact": %[4]q, "function": "number", "kind": "WASM_KIND_PROCESS", "memory_limit_mib": 64, "call_timeout_ms": "5000"}}},
    {"id": "table", "name": "table", "parallelism": %[5]d, "operator": {
       "postgres_sink": {"url": %[3]q, "table": %[9]q, "columns": [{"name": "user_id", "path": ""},
         {"name": "window_start", "path": "start"}, {"name": "clicks", "path": "count"}, {"name": "amount", "path": "sum"},
         {"name": "ordinal", "path": "ordinal"}]}}},
    {"id": "out", "name": "out", "parallelism": %[5]d, "operator": {
       "nats_sink": {"url": %[2]q, "stream": %[10]q, "subject": "windows.out", "key_header": "Jm-Key"}}}
  ],
  "edges": [
    {"source": "clicks", "target": "by-user", "distribution": "DISTRIBUTION_FORWARD", "result_type": "RESULT_TYPE_PIPELINED"},
    {"source": "by-user", "target": "windows", "distribution": "DISTRIBUTION_ALL_TO_ALL", "result_type": "RESULT_TYPE_PIPELINED"},
    {"source": "windows", "target": "number", "distribution": "DISTRIBUTION_ALL_TO_ALL", "result_type": "RESULT_TYPE_PIPELINED"},
    {"source": "number", "target": "table", "distribution": "DISTRIBUTION_FORWARD", "result_type": "RESULT_TYPE_PIPELINED"},
    {"source": "number", "target": "out", "distribution": "DISTRIBUTION_FORWARD", "result_type": "RESULT_TYPE_PIPELINED"}
  ],
  "restart_strategy": {"kind": "RESTART_KIND_FIXED_DELAY", "attempts": 100, "delay_ms": "1000"},
  "failover_strategy": "FAILOVER_STRATEGY_REGION",
  "checkpoint_config": {"interval_ms": "%[11]d", "timeout_ms": "%[12]d", "max_concurrent": 1, "retained": %[13]d},
  "dead_letters": {"operator": {"file_sink": {"path": %[14]q, "format": "FILE_SINK_FORMAT_VALUE"}}, "parallelism": 1}
}`, id, natsURL, pgURL, sha, PipelineParallelism, pipelineClicksStream, PipelineOutOfOrder.Milliseconds(),
		PipelineWindow.Milliseconds(), pipelineTable, pipelineOutStream, client.StreamCheckpointInterval.Milliseconds(),
		client.StreamCheckpointTimeout.Milliseconds(), client.StreamCheckpointRetained, pipelineDeadLetters)
	jg := &pb.JobGraph{}
	if err := protojson.Unmarshal([]byte(spec), jg); err != nil {
		return nil, fmt.Errorf("jepsen: the pipeline job: %w", err)
	}
	return jg, nil
}

func randomHex() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// lateAfterFirstRow turns the publisher's late clicks on once the table holds a row and a few
// checkpoints more completed: a committed row means its window task's checkpoint held a
// watermark past the first window, so every restore from then on restores one too, and a late
// click (event time before the first click's) is late for every window task of the intact build.
func (pl *pipeline) lateAfterFirstRow(ctx context.Context, p func(string, ...any)) {
	for ctx.Err() == nil {
		if rows, _ := pl.readTable(ctx); len(rows) > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(3 * client.StreamCheckpointInterval):
			}
			pl.pub.StartLate()
			p("pipeline: the first window committed; a late click after every %d clicks from now on", PipelineLateEvery)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}
