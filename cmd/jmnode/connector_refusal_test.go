package main

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/testkit/natstest"
	"github.com/jmcluster/jmcluster/testkit/pgtest"
	tc "github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The credentials of TestConnectorRefusalsNameTheServersAnswer: the servers' real ones, and a
// wrong password; none may appear in any file the cluster writes or in what the CLI prints.
const (
	refusalNatsPassword = "nats-right-0f3a9c"
	refusalPGPassword   = "pg-right-77be21"
	refusalWrongPG      = "pg-wrong-c0ffee"
)

// TestConnectorRefusalsNameTheServersAnswer: a job whose connector the server refuses — a wrong
// password, a missing table, a missing stream, a credential not in --secrets-dir — fails
// (restart strategy NONE), and `jmnode job status` names the cause with the server's own
// words; no credential's value is in that output, the job's full view (GetJob, as the REST
// API serves it), or any file of the cluster (its log, Raft logs and a snapshot, work
// directories).
func TestConnectorRefusalsNameTheServersAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS, PostgreSQL and a cluster")
	}
	ns := natstest.StartWith(t, natstest.Auth{User: "clicks", Password: refusalNatsPassword})
	ns.CreateStream(t, "TOTALS", "totals.>")
	pg := pgtest.Start(t)
	ctx := context.Background()
	if err := pg.CreateUserAndDatabase(ctx, "clicks", refusalPGPassword, "clicks"); err != nil {
		t.Fatal(err)
	}
	secrets := t.TempDir()
	for name, v := range map[string]string{"nats": "clicks:" + refusalNatsPassword, "pg": refusalPGPassword, "pg-wrong": refusalWrongPG} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := tc.New(t, tc.Options{JMs: 3, TMs: 1, Slots: 4, LogLevel: hclog.Debug,
		TM: func(cfg *taskmanager.Config) { cfg.SecretsDir = secrets }})
	addr := c.Leader().GRPCAddr
	events := func() *pb.Operator {
		return &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: &pb.EventGenerator{Seed: 1, Count: 10, Keys: 3}}}
	}
	pgSink := func(credential, table string) *pb.Operator {
		return &pb.Operator{Kind: &pb.Operator_PostgresSink{PostgresSink: &pb.PostgresSink{Url: pg.URL("clicks", "clicks"),
			Credential: credential, Table: table, Columns: []*pb.PostgresColumn{{Name: "user_id", Path: "user"}}}}}
	}
	natsSink := func(credential, stream string) *pb.Operator {
		return &pb.Operator{Kind: &pb.Operator_NatsSink{NatsSink: &pb.NatsSink{Url: ns.URL, Stream: stream, Subject: "totals.minute", Credential: credential}}}
	}
	cases := []struct {
		name  string
		src   *pb.Operator
		sink  *pb.Operator
		cause string
	}{
		{"wrong PostgreSQL password", events(), pgSink("pg-wrong", "minute_clicks"), `password authentication failed for user "clicks"`},
		{"missing table", events(), pgSink("pg", "no_such_table"), `relation "no_such_table" does not exist`},
		{"missing stream", events(), natsSink("nats", "NO_SUCH_STREAM"), "stream not found"},
		{"missing credential", events(), natsSink("not-there", "TOTALS"), `credential "not-there": no such file in --secrets-dir`},
		{"missing source stream", &pb.Operator{Kind: &pb.Operator_NatsSource{NatsSource: &pb.NatsSource{Url: ns.URL, Stream: "CLICKS", Credential: "nats"}}},
			&pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}, "stream not found"},
	}
	var printed bytes.Buffer
	for _, k := range cases {
		jg := &pb.JobGraph{Name: k.name, Type: pb.JobType_JOB_TYPE_STREAMING,
			Vertices: []*pb.JobVertex{{Id: "in", Parallelism: 1, Operator: k.src}, {Id: "out", Parallelism: 1, Operator: k.sink}},
			Edges: []*pb.JobEdge{{Source: "in", Target: "out", Distribution: pb.Distribution_DISTRIBUTION_FORWARD,
				ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}},
			RestartStrategy: &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_NONE}}
		if k.sink.GetPostgresSink() != nil {
			jg.DeadLetters = &pb.DeadLetters{Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}}
		}
		id := c.Submit(jg)
		c.WaitJob(id, k.name+": the job FAILED", time.Minute, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_FAILED })
		out := captureStdout(t, func() error { return run([]string{"job", "status", id, "--addr", addr}) })
		if !strings.Contains(out, k.cause) {
			t.Errorf("%s: jmnode job status does not name %q:\n%s", k.name, k.cause, out)
		}
		printed.WriteString(out)
		printed.WriteString(captureStdout(t, func() error { return run([]string{"job", "status", id, "--all", "--addr", addr}) }))
		r, err := c.Client(c.Leader()).GetJob(ctx, &pb.GetJobRequest{JobId: id}) // the full view, as the REST API serves it
		if err != nil {
			t.Fatal(err)
		}
		view, _ := protojson.Marshal(r)
		printed.Write(view)
	}
	for _, s := range []string{refusalNatsPassword, refusalPGPassword, refusalWrongPG} {
		if strings.Contains(printed.String(), s) {
			t.Errorf("the CLI printed a credential's value")
		}
	}
	if _, _, err := c.Leader().A.Node.Snapshot(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	var files int
	err := filepath.WalkDir(c.Dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for _, s := range []string{refusalNatsPassword, refusalPGPassword, refusalWrongPG} {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds a credential's value", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d cases refused with the server's answer; no credential in the CLI's output or in %d files of the cluster", len(cases), files)
}
