package operator

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/benchgoal"
	"github.com/jmcluster/jmcluster/testkit/pgtest"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// sinkCommitGoalRows is the rows of one checkpoint in TestGoalSinkCommitLatency: a second of
// a 1,000 records/s stream.
const sinkCommitGoalRows = 1000

// TestGoalSinkCommitLatency (JMC_GOALS=1, `make bench-short`): what a checkpoint costs the
// PostgreSQL sink, against the file sink in the same run. Per checkpoint of
// sinkCommitGoalRows JSON clicks of about 100 bytes, the time from the barrier to the output
// committed: PrepareCommit (the rest of the rows and PREPARE TRANSACTION; the file sink stages
// its lines) and then CommitCheckpoint (COMMIT PREPARED; the file sink writes and syncs its part
// file), as the TaskManager calls them; the server syncs its log (fsync on), as the file sink
// syncs its part. Trials(20, 60) checkpoints of each sink, alternating; the goal is the
// median PostgreSQL latency over the median file latency, at most 3x.
func TestGoalSinkCommitLatency(t *testing.T) {
	benchgoal.Skip(t)
	f := &pgFixture{t: t, srv: pgtest.StartDurable(t)}
	ctx := context.Background()
	if err := f.srv.CreateUserAndDatabase(ctx, "clicks", pgPassword, "clicks"); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.ExecIn(ctx, "clicks", "CREATE TABLE clicks (user_id text, amount bigint, ts bigint); ALTER TABLE clicks OWNER TO clicks"); err != nil {
		t.Fatal(err)
	}
	pg := f.mustOpen(f.spec("clicks", 0, "user_id:user", "amount:amount", "ts:ts"), f.info(true, 0, pgPassword))
	defer pg.Close()
	file, err := New(&pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "clicks.jsonl", Format: pb.FileSinkFormat_FILE_SINK_FORMAT_VALUE}}},
		Info{Job: "j", Vertex: "file", Checkpointed: true, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := file.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var pgLat, fileLat []time.Duration
	n := 0
	for id := range uint64(benchgoal.Trials(20, 60)) {
		for _, s := range []struct {
			o   Operator
			lat *[]time.Duration
		}{{pg, &pgLat}, {file, &fileLat}} {
			for i := range sinkCommitGoalRows {
				v := fmt.Appendf(nil, `{"user":"user-%03d","amount":%d,"ts":%d,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`, i%500, 1+i%9, int64(n+i))
				if err := s.o.Process(Record{Value: v, Time: NoTimestamp}, nil); err != nil {
					t.Fatal(err)
				}
			}
			c := s.o.(Committer)
			start := time.Now()
			if err := c.PrepareCommit(id + 1); err != nil {
				t.Fatal(err)
			}
			if err := c.CommitCheckpoint(id + 1); err != nil {
				t.Fatal(err)
			}
			*s.lat = append(*s.lat, time.Since(start))
		}
		n += sinkCommitGoalRows
	}
	if got := f.rows("SELECT count(*) FROM clicks"); len(got) != 1 || got[0] != fmt.Sprint(n) {
		t.Fatalf("the table holds %q rows, want %d", got, n)
	}
	mp, mf := medianDuration(pgLat), medianDuration(fileLat)
	t.Logf("per checkpoint of %d rows, from the barrier to the output committed: PostgreSQL median %s (p90 %s), file sink median %s (p90 %s), %d checkpoints each",
		sinkCommitGoalRows, mp, quantileDuration(pgLat, 0.9), mf, quantileDuration(fileLat, 0.9), len(pgLat))
	ratio := float64(mp) / float64(mf)
	benchgoal.Report(t, "postgres-commit-per-checkpoint-vs-file", ratio, 3, ratio <= 3, "x")
}

func medianDuration(ds []time.Duration) time.Duration { return quantileDuration(ds, 0.5) }

func quantileDuration(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
