package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/pgserver"
	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/testkit/benchgoal"
	"github.com/jmcluster/jmcluster/testkit/natstest"
	"github.com/jmcluster/jmcluster/testkit/pgtest"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The connector goal's jobs: the JetStream stream CLICKS of connectorGoalMessages JSON clicks
// of about 100 bytes, read by a bounded nats_source of two subtasks (stop_at_sequence the last
// message), FORWARD into a sink of two subtasks: a PostgreSQL table (postgres_sink, a row
// per click of three columns) or the file sink (a line per click), checkpointed every second,
// each sink committing per checkpoint.
const (
	connectorGoalMessages = 200_000
	connectorGoalInterval = 1000 // ms between checkpoints
)

func connectorGoalJob(url, pgURL string, toPostgres bool) *pb.JobGraph {
	src := &pb.Operator{Kind: &pb.Operator_NatsSource{NatsSource: &pb.NatsSource{Url: url, Stream: "CLICKS",
		StopAtSequence: connectorGoalMessages, MaxBufferedMessages: 4096}}}
	sink := &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "clicks-{job}-{subtask}.jsonl", Format: pb.FileSinkFormat_FILE_SINK_FORMAT_VALUE}}}
	jg := &pb.JobGraph{Name: "connector goal, file sink", Type: pb.JobType_JOB_TYPE_STREAMING,
		RestartStrategy:  &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_NONE},
		CheckpointConfig: &pb.CheckpointConfig{IntervalMs: connectorGoalInterval, TimeoutMs: 60_000}}
	if toPostgres {
		jg.Name = "connector goal, PostgreSQL sink"
		sink = &pb.Operator{Kind: &pb.Operator_PostgresSink{PostgresSink: &pb.PostgresSink{Url: pgURL, Credential: "pg-goal",
			Table: "clicks", Columns: []*pb.PostgresColumn{{Name: "user_id", Path: "user"}, {Name: "amount", Path: "amount"}, {Name: "ts", Path: "ts"}}}}}
		jg.DeadLetters = &pb.DeadLetters{Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}}
	}
	jg.Vertices = []*pb.JobVertex{{Id: "clicks", Parallelism: 2, Operator: src}, {Id: "out", Parallelism: 2, Operator: sink}}
	jg.Edges = []*pb.JobEdge{{Source: "clicks", Target: "out", Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}}
	return jg
}

// TestGoalJetStreamToPostgres (JMC_GOALS=1, `make bench-short`): records per second end to end
// from a JetStream stream into a PostgreSQL table, exactly once (a prepared transaction per
// subtask and checkpoint), against the same stream into the file sink, on one cluster, the
// same stream and a server of each kind in the process, the two jobs alternating,
// Trials(2, 5) of each; the goal is the median PostgreSQL rate over the median file rate, at
// least 0.7x: a row costs the sink its JSON lookups and its share of a multi-row INSERT, not a
// round trip. The rate is the stream's messages over the time from the last task RUNNING to
// the job FINISHED; a run whose table does not hold every click once fails the test. The
// PostgreSQL server syncs its log to disk (fsync on), as a server users run does.
func TestGoalJetStreamToPostgres(t *testing.T) {
	benchgoal.Skip(t)
	ns := natstest.Start(t)
	ns.CreateStream(t, "CLICKS", "clicks.>")
	publishGoalClicks(t, ns)
	pg := pgtest.StartDurable(t)
	ctx := context.Background()
	if err := pg.CreateUserAndDatabase(ctx, "goal", "goal-password", "goal"); err != nil {
		t.Fatal(err)
	}
	if err := pg.ExecIn(ctx, "goal", "CREATE TABLE clicks (user_id text, amount bigint, ts bigint); ALTER TABLE clicks OWNER TO goal"); err != nil {
		t.Fatal(err)
	}
	secrets := t.TempDir()
	if err := os.WriteFile(filepath.Join(secrets, "pg-goal"), []byte("goal-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2, Slots: 4, LogLevel: hclog.Warn, Checkpoints: true,
		TM: func(cfg *taskmanager.Config) { cfg.SecretsDir = secrets }})
	var file, toPG []float64
	for i := range benchgoal.Trials(2, 5) {
		for _, p := range []bool{false, true} {
			if p {
				if err := pg.ExecIn(ctx, "goal", "TRUNCATE clicks"); err != nil {
					t.Fatal(err)
				}
			}
			rate, elapsed := runConnectorGoalJob(t, c, connectorGoalJob(ns.URL, pg.URL("goal", "goal"), p))
			if p {
				checkGoalRows(t, pg)
				toPG = append(toPG, rate)
			} else {
				file = append(file, rate)
			}
			t.Logf("trial %d, %s: %.0f records/s (%d in %s)", i+1, connectorGoalName(p), rate, connectorGoalMessages, elapsed)
		}
	}
	mf, mp := median(file), median(toPG)
	t.Logf("JetStream -> file sink: %s records/s (median %.0f); JetStream -> PostgreSQL: %s records/s (median %.0f)", rates(file), mf, rates(toPG), mp)
	benchgoal.Report(t, "jetstream-to-postgres-vs-file", mp/mf, 0.7, mp/mf >= 0.7, "x")
}

func connectorGoalName(pg bool) string {
	if pg {
		return "JetStream -> PostgreSQL"
	}
	return "JetStream -> file sink"
}

// publishGoalClicks publishes the goal's clicks (about 100 bytes each) to CLICKS.
func publishGoalClicks(t *testing.T, ns *natstest.Server) {
	t.Helper()
	pad := strings.Repeat("x", 40)
	futures := make([]jetstream.PubAckFuture, 0, 4096)
	wait := func() {
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				t.Fatalf("publish: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("publish: no acknowledgement within 30s")
			}
		}
		futures = futures[:0]
	}
	for i := range connectorGoalMessages {
		b := fmt.Appendf(nil, `{"user":"user-%03d","amount":%d,"ts":%d,"pad":%q}`, i%500, 1+i%9, 1_796_515_200_000+int64(i), pad)
		f, err := ns.JS.PublishAsync(fmt.Sprintf("clicks.%d", i%8), b)
		if err != nil {
			t.Fatal(err)
		}
		if futures = append(futures, f); len(futures) == cap(futures) {
			wait()
		}
	}
	wait()
}

// runConnectorGoalJob submits one goal job and returns its rate: the stream's messages over
// the time from its last task RUNNING to FINISHED (the leader's committed timestamps).
func runConnectorGoalJob(t *testing.T, c *testcluster.Cluster, jg *pb.JobGraph) (float64, time.Duration) {
	t.Helper()
	id := c.Submit(jg)
	done := c.WaitJob(id, "the goal job FINISHED", 5*time.Minute, func(r *pb.JobRecord) bool { return graph.IsGloballyTerminal(r.Status) })
	if done.Status != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("%s ended %s", jg.Name, testcluster.Describe(done))
	}
	elapsed := runningToFinished(t, done)
	return float64(connectorGoalMessages) / elapsed.Seconds(), elapsed
}

// checkGoalRows fails the test unless the table holds every click once.
func checkGoalRows(t *testing.T, pg *pgserver.Server) {
	t.Helper()
	conn, err := pg.Connect(context.Background(), "goal")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var rows, distinct int64
	if err := conn.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT ts) FROM clicks").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != connectorGoalMessages || distinct != connectorGoalMessages {
		t.Fatalf("the table holds %d rows of %d distinct clicks, want each of the %d clicks once", rows, distinct, connectorGoalMessages)
	}
}
