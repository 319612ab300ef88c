package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jmcluster/jmcluster/internal/pgserver"
	"github.com/jmcluster/jmcluster/testkit/pgtest"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The postgres_sink tests' fixture: a real server (testkit/pgtest) with the user and
// database clicks, sinks built and opened as a task does, the table read back.

// pgPassword is the test user's password; no error may hold it.
const pgPassword = "s3cret-pw"

// pgFixture is a server with the user and database clicks, and the sinks' dead letters.
type pgFixture struct {
	t    testing.TB
	srv  *pgserver.Server
	dead []Record
}

func newPGFixture(t testing.TB, o pgserver.Options, ddl ...string) *pgFixture {
	t.Helper()
	f := &pgFixture{t: t, srv: pgtest.StartWith(t, o)}
	ctx := context.Background()
	if err := f.srv.CreateUserAndDatabase(ctx, "clicks", pgPassword, "clicks"); err != nil {
		t.Fatal(err)
	}
	for _, q := range ddl {
		if err := f.srv.ExecIn(ctx, "clicks", q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, q := range ddl {
		if strings.HasPrefix(q, "CREATE TABLE ") {
			table := strings.Fields(q)[2]
			if err := f.srv.ExecIn(ctx, "clicks", "ALTER TABLE "+table+" OWNER TO clicks"); err != nil {
				t.Fatal(err)
			}
		}
	}
	return f
}

// spec is a postgres_sink of table t with columns "name:path".
func (f *pgFixture) spec(table string, batch int32, cols ...string) *pb.PostgresSink {
	p := &pb.PostgresSink{Url: f.srv.URL("clicks", "clicks"), Credential: "pg", Table: table, BatchRows: batch}
	for _, c := range cols {
		name, path, _ := strings.Cut(c, ":")
		p.Columns = append(p.Columns, &pb.PostgresColumn{Name: name, Path: path})
	}
	return p
}

// info is subtask 0 of job j's vertex "pg", checkpointed or not, restored from checkpoint
// restored (0: none), its password "pg" and its dead letters in f.dead.
func (f *pgFixture) info(checkpointed bool, restored uint64, password string) Info {
	i := Info{Job: "j", Vertex: "pg", Checkpointed: checkpointed, RestoredCheckpoint: restored,
		Secret: func(name string) ([]byte, error) {
			if name != "pg" {
				return nil, fmt.Errorf("no credential %q", name)
			}
			return []byte(password + "\n"), nil
		},
		DeadLetters: func(r Record) error { f.dead = append(f.dead, r); return nil }}
	if restored > 0 {
		i.Restored = []byte(`{"prepared":"jm:j:pg:0:"}`)
	}
	return i
}

// open builds and opens the sink.
func (f *pgFixture) open(p *pb.PostgresSink, info Info) (Operator, error) {
	f.t.Helper()
	o, err := New(&pb.Operator{Kind: &pb.Operator_PostgresSink{PostgresSink: p}}, info)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := o.Open(context.Background()); err != nil {
		_ = o.Close()
		return nil, err
	}
	f.t.Cleanup(func() { _ = o.Close() })
	return o, nil
}

func (f *pgFixture) mustOpen(p *pb.PostgresSink, info Info) Operator {
	f.t.Helper()
	o, err := f.open(p, info)
	if err != nil {
		f.t.Fatal(err)
	}
	return o
}

// write feeds JSON values, keyed "k<i>".
func (f *pgFixture) write(o Operator, values ...string) {
	f.t.Helper()
	for i, v := range values {
		if err := o.Process(Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte(v), Time: NoTimestamp, Seq: int64(i)}, nil); err != nil {
			f.t.Fatal(err)
		}
	}
}

// rows is the table's rows as "a|b|..." text, sorted.
func (f *pgFixture) rows(q string) []string {
	f.t.Helper()
	conn, err := f.srv.Connect(context.Background(), "clicks")
	if err != nil {
		f.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rs, err := conn.Query(context.Background(), q)
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (string, error) {
		vals, err := r.Values()
		var parts []string
		for _, v := range vals {
			parts = append(parts, fmt.Sprint(v))
		}
		return strings.Join(parts, "|"), err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// prepareAsUser prepares, as the user clicks, a transaction of q named gid.
func (f *pgFixture) prepareAsUser(gid, q string) {
	f.t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(f.srv.URL("clicks", "clicks"))
	if err != nil {
		f.t.Fatal(err)
	}
	cfg.Password = pgPassword
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, stmt := range []string{"BEGIN", q, "PREPARE TRANSACTION '" + gid + "'"} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			f.t.Fatalf("%s: %v", stmt, err)
		}
	}
}

// reasons is the dead letters' reasons, in order.
func (f *pgFixture) reasons() []string {
	var out []string
	for _, r := range f.dead {
		var d DeadLetter
		if err := json.Unmarshal(r.Value, &d); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, d.Value+" => "+d.Reason)
	}
	return out
}

func values(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf(`{"id":%d,"user":"u%d"}`, i, i%3))
	}
	return out
}

func want(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%d|u%d", i, i%3))
	}
	slices.Sort(out)
	return out
}

// upsertOn makes p an upsert on keys.
func upsertOn(p *pb.PostgresSink, keys ...string) *pb.PostgresSink {
	p.Mode, p.KeyColumns = pb.PostgresMode_POSTGRES_MODE_UPSERT, keys
	return p
}

// syncBuffer is a log's output, written from the sink's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// pgWaitFor polls cond every 20 ms until it holds, failing with what it last saw after
// timeout.
func pgWaitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last seen: %s", what, timeout, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
