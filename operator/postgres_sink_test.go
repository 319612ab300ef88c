package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/internal/pgserver"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestPostgresSinkInsertsUpsertsAndSendsDeadLetters: without checkpoints each batch is
// committed; a record that is not JSON, lacks a field, or that the table refuses (a check, a
// duplicate key, a value its column cannot take) goes to the dead-letter output with the
// reason, and the other rows of its batch stay; an upsert keeps a key's last row, also when a
// batch names a key twice.
func TestPostgresSinkInsertsUpsertsAndSendsDeadLetters(t *testing.T) {
	f := newPGFixture(t, pgserver.Options{},
		"CREATE TABLE clicks (id int PRIMARY KEY, user_id text NOT NULL, n int CHECK (n >= 0), at timestamptz, k text)",
		"CREATE TABLE totals (user_id text, day date, n bigint, PRIMARY KEY (user_id, day))")
	o := f.mustOpen(f.spec("clicks", 3, "id:id", "user_id:user", "n:n", "at:at", "k:"), f.info(false, 0, pgPassword))
	f.write(o,
		`{"id":1,"user":"a","n":5,"at":"2026-12-06T10:00:00Z"}`,
		`{"id":2,"user":"b","n":null,"at":null}`,
		`not json`,
		`{"id":3,"n":1,"at":null}`,
		`{"id":4,"user":"c","n":-1,"at":null}`,
		`{"id":1,"user":"dup","n":1,"at":null}`,
		`{"id":"x","user":"e","n":1,"at":null}`,
		`{"id":5,"user":"f","n":7,"at":"2026-12-06T10:00:01Z"}`,
	)
	if got := f.rows("SELECT id, user_id, coalesce(n, -100), k FROM clicks WHERE id < 3"); !slices.Equal(got, []string{"1|a|5|k0", "2|b|-100|k1"}) {
		t.Fatalf("before Finish, the full batches are committed: %q", got)
	}
	if err := o.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if got, w := f.rows("SELECT id, user_id, k FROM clicks"), []string{"1|a|k0", "2|b|k1", "5|f|k7"}; !slices.Equal(got, w) {
		t.Fatalf("rows %q, want %q", got, w)
	}
	reasons := f.reasons()
	for i, w := range []string{
		"not json => not valid JSON",
		`{"id":3,"n":1,"at":null} => lacks the field user`,
		`violates check constraint "clicks_n_check"`,
		`duplicate key value violates unique constraint "clicks_pkey": Key (id)=(1) already exists. (SQLSTATE 23505)`,
		`invalid input syntax for type integer: "x" (SQLSTATE 22P02)`,
	} {
		if i >= len(reasons) || !strings.Contains(reasons[i], w) {
			t.Fatalf("dead letter %d: want one with %q, have %q", i, w, reasons)
		}
	}
	if len(reasons) != 5 {
		t.Fatalf("dead letters %q", reasons)
	}

	up := f.spec("totals", 10, "user_id:user", "day:day", "n:n")
	up.Mode, up.KeyColumns = pb.PostgresMode_POSTGRES_MODE_UPSERT, []string{"user_id", "day"}
	u := f.mustOpen(up, f.info(false, 0, pgPassword))
	f.write(u, `{"user":"a","day":"2026-12-06","n":1}`, `{"user":"b","day":"2026-12-06","n":2}`, `{"user":"a","day":"2026-12-06","n":3}`)
	if err := u.Finish(nil); err != nil {
		t.Fatal(err)
	}
	f.write(u, `{"user":"b","day":"2026-12-06","n":4}`)
	if err := u.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if got, w := f.rows("SELECT user_id, day::text, n FROM totals"), []string{"a|2026-12-06|3", "b|2026-12-06|4"}; !slices.Equal(got, w) {
		t.Fatalf("upserted rows %q, want %q", got, w)
	}
	if len(f.dead) != 5 {
		t.Fatalf("the upserts sent dead letters: %q", f.reasons()[5:])
	}
}

// TestPostgresSinkCommitsOnlyCompletedCheckpointsAndSettlesThemOnRestore: the rows of a
// segment are visible once its checkpoint completes; a task restored from checkpoint R commits
// what the earlier attempt prepared up to R and rolls back what it prepared later, the
// replayed rows after R end up in the table once, and Finish rolls back what a superseded
// attempt prepared after the restore.
func TestPostgresSinkCommitsOnlyCompletedCheckpointsAndSettlesThemOnRestore(t *testing.T) {
	f := newPGFixture(t, pgserver.Options{}, "CREATE TABLE ev (id int PRIMARY KEY, user_id text)")
	spec := f.spec("ev", 4, "id:id", "user_id:user")
	all := values(0, 40)
	q := "SELECT id, user_id FROM ev"
	a := f.mustOpen(spec, f.info(true, 0, pgPassword))
	c := a.(Committer)
	step := func(o Operator, id uint64, vals []string) {
		t.Helper()
		f.write(o, vals...)
		if _, err := o.SnapshotState(); err != nil {
			t.Fatal(err)
		}
		if err := o.(Committer).PrepareCommit(id); err != nil {
			t.Fatal(err)
		}
	}
	step(a, 1, all[0:10])
	if got := f.rows(q); len(got) != 0 {
		t.Fatalf("before checkpoint 1 completes: %q", got)
	}
	if err := c.CommitCheckpoint(1); err != nil {
		t.Fatal(err)
	}
	if got := f.rows(q); !slices.Equal(got, want(0, 10)) {
		t.Fatalf("checkpoint 1 committed: %q", got)
	}
	step(a, 2, all[10:20])
	step(a, 3, all[20:30])
	f.write(a, all[30:35]...) // in the open transaction, lost with the task
	if c.Committed() != 1 {
		t.Fatalf("Committed %d", c.Committed())
	}
	_ = a.Close()
	if got := f.rows("SELECT gid FROM pg_prepared_xacts"); !slices.Equal(got, []string{"jm:j:pg:0:2", "jm:j:pg:0:3"}) {
		t.Fatalf("prepared: %q", got)
	}

	b := f.mustOpen(spec, f.info(true, 2, pgPassword))
	if got := f.rows("SELECT gid FROM pg_prepared_xacts"); len(got) != 0 {
		t.Fatalf("after the restore from checkpoint 2, still prepared: %q", got)
	}
	if got := f.rows(q); !slices.Equal(got, want(0, 20)) {
		t.Fatalf("after the restore from checkpoint 2: %q", got)
	}
	if b.(Committer).Committed() != 2 {
		t.Fatalf("Committed %d after the restore", b.(Committer).Committed())
	}
	step(b, 3, all[20:30]) // the replay
	f.write(b, all[30:40]...)
	// A superseded attempt that prepares after b's Open (a TaskManager cut off, not yet
	// fenced): b's Finish rolls it back, its rows being b's too.
	f.prepareAsUser("jm:j:pg:0:4", `INSERT INTO ev VALUES (999, 'stray')`)
	if err := b.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if got := f.rows(q); !slices.Equal(got, want(0, 40)) {
		t.Fatalf("after Finish: %d rows, want 40: %q", len(got), got)
	}
	if got := f.rows("SELECT gid FROM pg_prepared_xacts"); len(got) != 0 {
		t.Fatalf("after Finish, still prepared: %q", got)
	}
	if len(f.dead) != 0 {
		t.Fatalf("dead letters: %q", f.reasons())
	}
}

// TestPostgresSinkFailsWithTheServersAnswer: a wrong password, a missing table or column,
// and a server without prepared transactions under checkpoints fail Open with the server's
// answer, never holding the password.
func TestPostgresSinkFailsWithTheServersAnswer(t *testing.T) {
	f := newPGFixture(t, pgserver.Options{MaxPreparedTransactions: -1}, "CREATE TABLE ev (id int PRIMARY KEY, user_id text)")
	for _, c := range []struct {
		name         string
		spec         *pb.PostgresSink
		checkpointed bool
		password     string
		want         string
	}{
		{"wrong password", f.spec("ev", 0, "id:id"), false, "wrong-" + pgPassword, "SQLSTATE 28P01"},
		{"missing table", f.spec("nope", 0, "id:id"), false, pgPassword, `table nope: ERROR: relation "nope" does not exist (SQLSTATE 42P01)`},
		{"missing column", f.spec("ev", 0, "id:id", "zzz:z"), false, pgPassword, `column "zzz" of relation "ev" does not exist`},
		{"no prepared transactions", f.spec("ev", 0, "id:id"), true, pgPassword, "max_prepared_transactions is 0"},
		{"upsert without a unique key", upsertOn(f.spec("ev", 0, "id:id", "user_id:user"), "user_id"), false, pgPassword, "SQLSTATE 42P10"},
	} {
		_, err := f.open(c.spec, f.info(c.checkpointed, 0, c.password))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), pgPassword) {
			t.Errorf("%s: %v, want an error with %q and without the password", c.name, err, c.want)
		}
	}
}

// TestPostgresSinkSurvivesServerRestarts: the server restarts while a transaction is open
// (rows sent), and between a PREPARE and its COMMIT PREPARED: the sink reconnects, writes the
// open transaction again, commits the prepared one, and the table holds every row once.
func TestPostgresSinkSurvivesServerRestarts(t *testing.T) {
	f := newPGFixture(t, pgserver.Options{}, "CREATE TABLE ev (id int PRIMARY KEY, user_id text)")
	var log syncBuffer
	info := f.info(true, 0, pgPassword)
	info.Logger = hclog.New(&hclog.LoggerOptions{Output: &log})
	o := f.mustOpen(f.spec("ev", 10, "id:id", "user_id:user"), info)
	c := o.(Committer)
	all := values(0, 100)
	ctx := context.Background()
	f.write(o, all[0:25]...) // two batches sent in the open transaction
	if err := f.srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	f.write(o, all[25:50]...)
	if err := c.PrepareCommit(1); err != nil {
		t.Fatal(err)
	}
	if err := c.CommitCheckpoint(1); err != nil {
		t.Fatal(err)
	}
	if got := f.rows("SELECT id, user_id FROM ev"); !slices.Equal(got, want(0, 50)) {
		t.Fatalf("checkpoint 1 across a restart: %d rows, want 50", len(got))
	}
	f.write(o, all[50:75]...)
	if err := c.PrepareCommit(2); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.CommitCheckpoint(2); err != nil {
		t.Fatal(err)
	}
	f.write(o, all[75:100]...)
	if err := o.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if got := f.rows("SELECT id, user_id FROM ev"); !slices.Equal(got, want(0, 100)) {
		t.Fatalf("after two restarts: %d rows, want 100", len(got))
	}
	if got := f.rows("SELECT gid FROM pg_prepared_xacts"); len(got) != 0 {
		t.Fatalf("still prepared: %q", got)
	}
	if len(f.dead) != 0 {
		t.Fatalf("dead letters: %q", f.reasons())
	}
	if n := strings.Count(log.String(), "connection lost, reconnecting"); n < 2 || strings.Contains(log.String(), pgPassword) {
		t.Fatalf("the log has %d reconnections (want one per restart at least), or the password:\n%s", n, log.String())
	}
}

// TestPostgresSinkRewritesATransactionTheServerEnded: the server ends the sink's session
// while its transaction is open (idle_in_transaction_session_timeout): the sink reconnects,
// writes the transaction again, and the checkpoint's rows are in the table once.
func TestPostgresSinkRewritesATransactionTheServerEnded(t *testing.T) {
	f := newPGFixture(t, pgserver.Options{}, "CREATE TABLE ev (id int PRIMARY KEY, user_id text)")
	if err := f.srv.Exec(context.Background(), "ALTER ROLE clicks SET idle_in_transaction_session_timeout = '100ms'"); err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	info := f.info(true, 0, pgPassword)
	info.Logger = hclog.New(&hclog.LoggerOptions{Output: &log})
	o := f.mustOpen(f.spec("ev", 10, "id:id", "user_id:user"), info)
	all := values(0, 30)
	f.write(o, all[0:15]...) // one batch sent: the transaction is open
	pgWaitFor(t, 30*time.Second, "the server ended the sink's session idle in its transaction", func() (bool, string) {
		got := f.rows("SELECT state FROM pg_stat_activity WHERE usename = 'clicks'")
		return !slices.Contains(got, "idle in transaction"), fmt.Sprintf("the sessions of clicks: %q", got)
	})
	f.write(o, all[15:30]...)
	c := o.(Committer)
	if err := c.PrepareCommit(1); err != nil {
		t.Fatal(err)
	}
	if err := c.CommitCheckpoint(1); err != nil {
		t.Fatal(err)
	}
	if got := f.rows("SELECT id, user_id FROM ev"); !slices.Equal(got, want(0, 30)) {
		t.Fatalf("%d rows, want 30: %q", len(got), got)
	}
	if !strings.Contains(log.String(), "connection lost, reconnecting") {
		t.Fatalf("no reconnection logged:\n%s", log.String())
	}
}

// TestPostgresSinkFindsAPrepareWhoseAnswerWasLost: the connection is lost right after a
// PREPARE went through: the reconnected sink finds the name on the server, writes nothing
// again, and commits it with its checkpoint.
func TestPostgresSinkFindsAPrepareWhoseAnswerWasLost(t *testing.T) {
	f := newPGFixture(t, pgserver.Options{}, "CREATE TABLE ev (id int PRIMARY KEY, user_id text)")
	o := f.mustOpen(f.spec("ev", 10, "id:id", "user_id:user"), f.info(true, 0, pgPassword))
	c := o.(Committer)
	lost := 0
	postgresLosePrepareAnswer = func() bool { lost++; return lost == 1 }
	t.Cleanup(func() { postgresLosePrepareAnswer = nil })
	f.write(o, values(0, 25)...)
	if err := c.PrepareCommit(1); err != nil {
		t.Fatal(err)
	}
	if lost != 1 {
		t.Fatalf("%d PREPAREs, want one (the second attempt finds the name)", lost)
	}
	if got := f.rows("SELECT gid FROM pg_prepared_xacts"); !slices.Equal(got, []string{"jm:j:pg:0:1"}) {
		t.Fatalf("prepared: %q", got)
	}
	if err := c.CommitCheckpoint(1); err != nil {
		t.Fatal(err)
	}
	if got := f.rows("SELECT id, user_id FROM ev"); !slices.Equal(got, want(0, 25)) || len(f.dead) != 0 {
		t.Fatalf("%d rows, want 25; dead letters %q", len(got), f.reasons())
	}
}
