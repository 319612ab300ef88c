package jobmaster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// fileLines writes n lines "<file>:<i>" (from i = from on) to the end of the file name in
// dir, creating it, and returns them.
func fileLines(t *testing.T, dir, name string, from, n int) []string {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b strings.Builder
	var lines []string
	for i := from; i < from+n; i++ {
		l := fmt.Sprintf("%s:%d", name, i)
		lines = append(lines, l)
		b.WriteString(l + "\n")
	}
	if _, err := f.WriteString(b.String()); err != nil {
		t.Fatal(err)
	}
	return lines
}

func fileSourceJob(glob string) *pb.JobGraph {
	fwd := &pb.JobEdge{Source: "lines", Target: "out", Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
	return &pb.JobGraph{
		Name: "file source", Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "lines", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_FileSource{FileSource: &pb.FileSource{Path: glob, PollIntervalMs: 20}}}},
			{Id: "out", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "lines-{subtask}.txt", Format: pb.FileSinkFormat_FILE_SINK_FORMAT_VALUE}}}},
		},
		Edges:            []*pb.JobEdge{fwd},
		CheckpointConfig: &pb.CheckpointConfig{IntervalMs: 200},
		RestartStrategy:  &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 5, DelayMs: 100},
	}
}

// TestFileSourceExactlyOnceAcrossATaskManagerKill: a STREAMING job reads the lines of files
// the test writes (before the job, while it runs, right before and after a TaskManager is
// killed: lines appended and new files) into a two-phase file sink. The region of the killed
// TaskManager is restored from the last completed checkpoint; at the end the committed
// output holds every line written exactly once.
func TestFileSourceExactlyOnceAcrossATaskManagerKill(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for _, f := range []string{"a.txt", "b.txt", "c.txt", "d.txt"} {
		want = append(want, fileLines(t, dir, f, 0, 100)...)
	}
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 3, Checkpoints: true})
	id := c.Submit(fileSourceJob(filepath.Join(dir, "*.txt")))
	before := testcluster.Attempts(waitAllRunning(t, c, id))
	completed := func(n uint64) func() (bool, string) {
		return func() (bool, string) {
			ck, ok := c.Leader().A.State.LatestCompletedCheckpoint(id)
			return ok && ck.GetId() >= n, describeCheckpoints(checkpointsOf(c, id))
		}
	}
	testcluster.WaitFor(t, 30*time.Second, "two completed checkpoints", completed(2))
	for _, f := range []string{"a.txt", "b.txt", "c.txt", "d.txt"} {
		want = append(want, fileLines(t, dir, f, 100, 100)...)
	}
	want = append(want, fileLines(t, dir, "e.txt", 0, 100)...)

	victim := before["lines[0]"].TM
	c.KillTM(tmByID(t, c, victim))
	c.WaitJob(id, "region 0 restored and every task RUNNING", 60*time.Second, func(r *pb.JobRecord) bool {
		return testcluster.AllRunning(r) && testcluster.Attempts(r)["lines[0]"].Number > before["lines[0]"].Number
	})
	for _, f := range []string{"a.txt", "f.txt", "g.txt"} {
		from := 0
		if f == "a.txt" {
			from = 200
		}
		want = append(want, fileLines(t, dir, f, from, 100)...)
	}

	count := map[string]int{}
	testcluster.WaitFor(t, 60*time.Second, fmt.Sprintf("the %d lines written committed", len(want)), func() (bool, string) {
		count = map[string]int{}
		n := 0
		for _, l := range committedLinesOf(t, c, "lines-*.txt") {
			count[l]++
			n++
		}
		missing := 0
		for _, l := range want {
			if count[l] == 0 {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d lines committed, %d of the %d written missing", n, missing, len(want))
	})
	written := map[string]bool{}
	for _, l := range want {
		written[l] = true
	}
	for l, n := range count {
		if n != 1 || !written[l] {
			t.Fatalf("line %q committed %d times (written: %v)", l, n, written[l])
		}
	}
	t.Logf("%d lines of 7 files committed exactly once; TaskManager %s killed, region 0 restored", len(want), victim)
}
