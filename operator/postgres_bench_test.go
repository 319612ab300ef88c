package operator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/internal/pgserver"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// postgresBenchSegment is the rows between two checkpoints in BenchmarkPostgresSink.
const postgresBenchSegment = 5000

// BenchmarkPostgresSink: rows through the checkpointed sink into a real server on the same
// machine (fsync off), batch_rows 500 and a checkpoint every postgresBenchSegment rows. Its
// metrics: rows/s, and ms/commit, a checkpoint's PrepareCommit (the segment's last batch and
// PREPARE TRANSACTION) plus its CommitCheckpoint (COMMIT PREPARED).
func BenchmarkPostgresSink(b *testing.B) {
	f := newPGFixture(b, pgserver.Options{}, "CREATE TABLE ev (id bigint PRIMARY KEY, user_id text, n int, at timestamptz)")
	ctx := context.Background()
	op := &pb.Operator{Kind: &pb.Operator_PostgresSink{PostgresSink: f.spec("ev", 500, "id:id", "user_id:user", "n:n", "at:at")}}
	o, err := New(op, f.info(true, 0, pgPassword))
	if err != nil {
		b.Fatal(err)
	}
	if err := o.Open(ctx); err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	c := o.(Committer)
	var commits int
	var commitTime time.Duration
	var id uint64
	b.ResetTimer()
	for i := range b.N {
		v := fmt.Appendf(nil, `{"id":%d,"user":"user-%04d","n":%d,"at":"2026-12-06T10:%02d:%02dZ"}`, i, i%1000, i%97, (i/60)%60, i%60)
		if err := o.Process(Record{Value: v, Time: NoTimestamp}, nil); err != nil {
			b.Fatal(err)
		}
		if (i+1)%postgresBenchSegment == 0 {
			id++
			start := time.Now()
			if err := c.PrepareCommit(id); err != nil {
				b.Fatal(err)
			}
			if err := c.CommitCheckpoint(id); err != nil {
				b.Fatal(err)
			}
			commitTime += time.Since(start)
			commits++
		}
	}
	if err := o.Finish(nil); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if got := f.rows("SELECT count(*) FROM ev"); len(got) != 1 || got[0] != fmt.Sprint(b.N) {
		b.Fatalf("the table holds %q rows, want %d", got, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	if commits > 0 {
		b.ReportMetric(float64(commitTime.Microseconds())/1000/float64(commits), "ms/commit")
	}
}
