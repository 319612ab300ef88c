package jobmaster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jmcluster/jmcluster/internal/pgserver"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/testkit/pgtest"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/testkit/windowcheck"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The PostgreSQL job of the end-to-end tests: seeded events (two splits, 100 ms of event time
// apart, out of order by up to 300 ms, paced so the job runs about fifteen seconds and a
// 60-second window closes every two or three), keyed by user, counted and summed in tumbling
// windows of 60 s, each result a row of minute_totals written by a postgres_sink of
// parallelism 2; beside it every event a row of events (a sink that has rows in every
// checkpoint's transaction); checkpoints every 200 ms.
const pgPassword = "e2e-s3cret"

func pgGenerator() *pb.EventGenerator {
	return &pb.EventGenerator{Seed: 3803, Count: 3000, Keys: 20, KeySkew: 0.5, StartMs: 1_700_000_000_000, StepMs: 100,
		MaxDisorderMs: 300, RatePerSecond: 200, MaxAmount: 1000}
}

func pgWindow() *pb.WindowOperator {
	return &pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_TUMBLING, SizeMs: 60_000, Field: "amount"}
}

func pgJob(url string) *pb.JobGraph {
	edge := func(s, d string, dist pb.Distribution) *pb.JobEdge {
		return &pb.JobEdge{Source: s, Target: d, Distribution: dist, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
	}
	const fwd, all = pb.Distribution_DISTRIBUTION_FORWARD, pb.Distribution_DISTRIBUTION_ALL_TO_ALL
	sink := &pb.PostgresSink{Url: url, Credential: "pg-clicks", Table: "minute_totals", BatchRows: 16,
		Columns: []*pb.PostgresColumn{{Name: "user_id", Path: "key"}, {Name: "window_start", Path: "start"},
			{Name: "window_end", Path: "end"}, {Name: "clicks", Path: "count"}, {Name: "amount", Path: "sum"}}}
	raw := &pb.PostgresSink{Url: url, Credential: "pg-clicks", Table: "events", BatchRows: 16,
		Columns: []*pb.PostgresColumn{{Name: "user_id", Path: "user"}, {Name: "amount", Path: "amount"}, {Name: "ts", Path: "ts"}}}
	return &pb.JobGraph{
		Name: "postgres exactly once", Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "events", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: pgGenerator()},
				EventTime: &pb.EventTime{MaxOutOfOrdernessMs: 300, WatermarkIntervalMs: 50}}},
			{Id: "by-user", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_JsonKeyBy{JsonKeyBy: &pb.JsonKeyBy{Path: "user"}}}},
			{Id: "window", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_Window{Window: pgWindow()}}},
			{Id: "out", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_PostgresSink{PostgresSink: sink}}},
			{Id: "raw", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_PostgresSink{PostgresSink: raw}}},
		},
		Edges: []*pb.JobEdge{edge("events", "by-user", fwd), edge("by-user", "window", all), edge("window", "out", fwd),
			edge("by-user", "raw", fwd)},
		DeadLetters: &pb.DeadLetters{Operator: &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{
			Path: "dead-{subtask}.jsonl", Format: pb.FileSinkFormat_FILE_SINK_FORMAT_VALUE}}}},
		CheckpointConfig: &pb.CheckpointConfig{IntervalMs: 200},
		RestartStrategy:  &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 5, DelayMs: 100},
	}
}

// startPostgresForJob starts a server with the user and database clicks and the table
// minute_totals (no unique key: a row written twice stays twice), and the TaskManagers'
// secrets directory holding the user's password as the credential pg-clicks.
func startPostgresForJob(t *testing.T) (*pgserver.Server, func(*taskmanager.Config)) {
	t.Helper()
	srv := pgtest.Start(t)
	ctx := context.Background()
	if err := srv.CreateUserAndDatabase(ctx, "clicks", pgPassword, "clicks"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE TABLE minute_totals (user_id text NOT NULL, window_start bigint NOT NULL, window_end bigint NOT NULL, clicks bigint NOT NULL, amount numeric NOT NULL)",
		"ALTER TABLE minute_totals OWNER TO clicks",
		"CREATE TABLE events (user_id text NOT NULL, amount bigint NOT NULL, ts bigint NOT NULL)",
		"ALTER TABLE events OWNER TO clicks",
	} {
		if err := srv.ExecIn(ctx, "clicks", q); err != nil {
			t.Fatal(err)
		}
	}
	secrets := filepath.Join(t.TempDir(), "secrets")
	if err := os.Mkdir(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secrets, "pg-clicks"), []byte(pgPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, func(cfg *taskmanager.Config) { cfg.SecretsDir = secrets }
}

// pgRows runs q as the admin on database clicks and returns its rows as "a|b|..." text,
// sorted.
func pgRows(t *testing.T, srv *pgserver.Server, q string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := srv.Connect(ctx, "clicks")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rs, err := conn.Query(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (string, error) {
		vals, err := r.Values()
		parts := make([]string, len(vals))
		for i, v := range vals {
			parts[i] = fmt.Sprint(v)
		}
		return strings.Join(parts, "|"), err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// checkPostgresWindows fails unless minute_totals holds every (user, window) result the
// reference computes from the generator's seed exactly once, no transaction is left
// prepared, and the job sent no dead letter.
func checkPostgresWindows(t *testing.T, c *testcluster.Cluster, srv *pgserver.Server) {
	t.Helper()
	var want []string
	for _, r := range windowcheck.Expected(pgGenerator(), 2, pgWindow()) {
		want = append(want, fmt.Sprintf("%s|%d|%d|%d|%d", r.Key, r.Start, r.End, r.Count, int64(r.Sum)))
	}
	slices.Sort(want)
	got := pgRows(t, srv, "SELECT user_id, window_start, window_end, clicks, amount::bigint FROM minute_totals")
	if !slices.Equal(got, want) {
		var missing, extra []string
		for _, w := range want {
			if !slices.Contains(got, w) {
				missing = append(missing, w)
			}
		}
		seen := map[string]bool{}
		for _, g := range got {
			if seen[g] || !slices.Contains(want, g) {
				extra = append(extra, g)
			}
			seen[g] = true
		}
		t.Fatalf("minute_totals holds %d rows, the reference %d: missing %q, extra or twice %q", len(got), len(want), missing, extra)
	}
	var events []string
	for split := range int32(2) {
		for i := range pgGenerator().GetCount() {
			e := operator.GeneratedEvent(pgGenerator(), split, i)
			events = append(events, fmt.Sprintf("%s|%d|%d", e.User, e.Amount, e.TimeMs))
		}
	}
	slices.Sort(events)
	if got := pgRows(t, srv, "SELECT user_id, amount, ts FROM events"); !slices.Equal(got, events) {
		t.Fatalf("events holds %d rows, the generator made %d events (each must be there once)", len(got), len(events))
	}
	if p := pgRows(t, srv, "SELECT gid FROM pg_prepared_xacts"); len(p) > 0 {
		t.Fatalf("transactions left prepared after the job finished: %q", p)
	}
	if dead := committedLinesOf(t, c, "dead-0.jsonl"); len(dead) > 0 {
		t.Fatalf("%d dead letters, want none: first %q", len(dead), dead[0])
	}
	t.Logf("%d window rows in minute_totals and %d events in events, each once; nothing left prepared", len(got), len(events))
}

// TestPostgresSinkExactlyOnceAcrossTMAndLeaderKills: once two checkpoints completed, the
// TaskManager of a raw sink seen holding a prepared transaction is killed (the job's one
// region is restored from the latest checkpoint elsewhere, and the restored sinks commit or
// roll back by name what the killed attempts prepared), and once a checkpoint completed after
// that, the leader. The tables end with every window row and every event exactly once.
func TestPostgresSinkExactlyOnceAcrossTMAndLeaderKills(t *testing.T) {
	srv, tmCfg := startPostgresForJob(t)
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 3, Slots: 8, Checkpoints: true, TM: tmCfg})
	id := c.Submit(pgJob(srv.URL("clicks", "clicks")))
	before := testcluster.Attempts(waitAllRunning(t, c, id))
	completed := func(n uint64) func() (bool, string) {
		return func() (bool, string) {
			ck, ok := c.Leader().A.State.LatestCompletedCheckpoint(id)
			return ok && ck.GetId() >= n, describeCheckpoints(checkpointsOf(c, id))
		}
	}
	testcluster.WaitFor(t, 30*time.Second, "two completed checkpoints", completed(2))

	// The victim: the TaskManager of a raw sink seen holding a prepared transaction (its
	// checkpoint not completed yet, or its commit not arrived), so that the restored sink
	// settles it by name (unless the commit wins the race with the kill).
	ctx := context.Background()
	conn, err := srv.Connect(ctx, "clicks")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var gid string
	testcluster.WaitFor(t, 30*time.Second, "a transaction of a raw sink prepared", func() (bool, string) {
		err := conn.QueryRow(ctx, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'jm:%:raw:%' LIMIT 1").Scan(&gid)
		return err == nil, fmt.Sprint(err)
	})
	parts := strings.Split(gid, ":")
	task := "raw[" + parts[len(parts)-2] + "]"
	victim := before[task].TM
	c.KillTM(tmByID(t, c, victim))
	restarted := c.WaitJob(id, "the region restored and every task RUNNING", 60*time.Second, func(r *pb.JobRecord) bool {
		return testcluster.AllRunning(r) && testcluster.Attempts(r)[task].Number > before[task].Number
	})
	ck, _ := c.Leader().A.State.LatestCompletedCheckpoint(id)
	testcluster.WaitFor(t, 30*time.Second, "a checkpoint completed after the restore", completed(ck.GetId()+1))
	if restarted.Status == pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatal("the job finished before the leader kill: make it run longer")
	}

	leader := c.Leader()
	c.KillJM(leader)
	if next := c.Leader(); next == leader {
		t.Fatal("no new leader")
	}
	c.WaitJob(id, "the job FINISHED", 120*time.Second, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_FINISHED })
	log, err := os.ReadFile(c.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	settled := strings.Count(string(log), "postgres_sink: settling a transaction another attempt prepared")
	t.Logf("TaskManager %s (%s, %s prepared) killed, the region restored from a checkpoint (%d transactions of the killed attempts settled by name); the leader %s killed", victim, task, gid, settled, leader.ID)
	checkPostgresWindows(t, c, srv)
}

// TestPostgresSinkExactlyOnceAcrossAPostgresRestart: the server restarts while the job
// writes (open transactions lost, prepared ones kept): the sinks reconnect and write their
// open transactions again, or fail and are restored; the output is delayed, and the table
// ends with every window row exactly once.
func TestPostgresSinkExactlyOnceAcrossAPostgresRestart(t *testing.T) {
	srv, tmCfg := startPostgresForJob(t)
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2, Slots: 8, Checkpoints: true, TM: tmCfg})
	id := c.Submit(pgJob(srv.URL("clicks", "clicks")))
	waitAllRunning(t, c, id)
	testcluster.WaitFor(t, 30*time.Second, "two completed checkpoints and some rows committed", func() (bool, string) {
		ck, ok := c.Leader().A.State.LatestCompletedCheckpoint(id)
		n := pgRows(t, srv, "SELECT count(*) FROM minute_totals")
		return ok && ck.GetId() >= 2 && n[0] != "0", fmt.Sprintf("%s; %s rows", describeCheckpoints(checkpointsOf(c, id)), n[0])
	})
	if err := srv.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.Job(id).Status == pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatal("the job finished before the server restarted: make it run longer")
	}
	done := c.WaitJob(id, "the job FINISHED", 120*time.Second, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_FINISHED })
	log, err := os.ReadFile(c.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	lost := strings.Count(string(log), "postgres_sink: connection lost, reconnecting")
	if lost == 0 && done.Restarts == 0 {
		t.Fatal("no sink lost its connection and the job never restarted: the restart did not reach the sinks")
	}
	if strings.Contains(string(log), pgPassword) {
		t.Fatal("the cluster log holds the password")
	}
	t.Logf("the server restarted during the job: %d reconnection attempts logged, %d restarts of the job", lost, done.Restarts)
	checkPostgresWindows(t, c, srv)
}
