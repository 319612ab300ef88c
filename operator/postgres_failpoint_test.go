package operator

import (
	"slices"
	"testing"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/internal/pgserver"
)

// postgresAcrossAbortedCheckpoint runs a checkpointed postgres_sink on a real server (a table
// without a unique key, as the pipeline's): rows 0-9 and checkpoint 1 completed, rows 10-19
// and the barrier of checkpoint 2, which never completes (the task is killed), then a task
// restored from checkpoint 1 that writes rows 10-19 again (the replay) and completes
// checkpoint 2. It returns the rows visible before checkpoint 2's restore and at the end.
func postgresAcrossAbortedCheckpoint(t *testing.T, table string) (atBarrier, after []string) {
	t.Helper()
	f := newPGFixture(t, pgserver.Options{}, "CREATE TABLE "+table+" (id int, user_id text)")
	spec := f.spec(table, 4, "id:id", "user_id:user")
	all := values(0, 20)
	q := "SELECT id, user_id FROM " + table
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
	a := f.mustOpen(spec, f.info(true, 0, pgPassword))
	step(a, 1, all[0:10])
	if err := a.(Committer).CommitCheckpoint(1); err != nil {
		t.Fatal(err)
	}
	step(a, 2, all[10:20])
	atBarrier = f.rows(q)
	_ = a.Close() // killed before checkpoint 2 completed

	b := f.mustOpen(spec, f.info(true, 1, pgPassword))
	step(b, 2, all[10:20]) // the replay
	if err := b.(Committer).CommitCheckpoint(2); err != nil {
		t.Fatal(err)
	}
	return atBarrier, f.rows(q)
}

// TestPostgresCommitAtBarrierWritesRowsTwice: the intact sink prepares checkpoint 2's rows at
// its barrier, so nothing of it is visible, the restored task rolls the prepared transaction
// back and the replay writes each row once; with postgres-commit-at-barrier the rows are
// committed at the barrier, before the checkpoint completed, and the replay writes them a
// second time: rows 10-19 are in the table twice.
func TestPostgresCommitAtBarrierWritesRowsTwice(t *testing.T) {
	atBarrier, after := postgresAcrossAbortedCheckpoint(t, "intact")
	if !slices.Equal(atBarrier, want(0, 10)) {
		t.Fatalf("intact build: at checkpoint 2's barrier the table holds %q, want rows 0-9", atBarrier)
	}
	if !slices.Equal(after, want(0, 20)) {
		t.Fatalf("intact build: after the replay the table holds %d rows, want rows 0-19 once: %q", len(after), after)
	}

	failpoint.Set(t, failpoint.PostgresCommitAtBarrier.Name())
	atBarrier, after = postgresAcrossAbortedCheckpoint(t, "broken")
	if !slices.Equal(atBarrier, want(0, 20)) {
		t.Fatalf("with postgres-commit-at-barrier: at checkpoint 2's barrier the table holds %q, want rows 0-19 (committed at the barrier)", atBarrier)
	}
	twice := slices.Sorted(slices.Values(append(want(0, 20), want(10, 20)...)))
	if !slices.Equal(after, twice) {
		t.Fatalf("with postgres-commit-at-barrier: after the replay the table holds %d rows, want rows 10-19 twice: %q", len(after), after)
	}
	t.Logf("caught: with postgres-commit-at-barrier the table holds %d rows for 20 records (rows 10-19 twice)", len(after))
}
