package operator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func fileSourceOp(glob string, extra func(*pb.FileSource)) *pb.Operator {
	f := &pb.FileSource{Path: glob, KeyFileName: true, PollIntervalMs: 10}
	if extra != nil {
		extra(f)
	}
	return &pb.Operator{Kind: &pb.Operator_FileSource{FileSource: f}}
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, name, content string) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
}

// runFiles runs a BATCH file source of op as subtask sub of par from restored state and
// returns its records as "file:line"; stopAt > 0 stops it at that many records with the
// state a barrier in front of the next one takes.
func runFiles(t *testing.T, op *pb.Operator, sub, par int32, restored []byte, stopAt int) ([]string, []byte) {
	t.Helper()
	src, err := NewSource(op, Info{Subtask: sub, Parallelism: par, Restored: restored, JobType: pb.JobType_JOB_TYPE_BATCH})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var state []byte
	errStop := errors.New("stop")
	err = src.Run(context.Background(), func(r Record) error {
		if r.Watermark {
			return nil
		}
		if stopAt > 0 && len(out) == stopAt {
			if state, err = src.SnapshotState(); err != nil {
				t.Fatal(err)
			}
			return errStop
		}
		if r.Origin != sub {
			t.Fatalf("record %q of origin %d from subtask %d", r.Value, r.Origin, sub)
		}
		out = append(out, string(r.Key)+":"+string(r.Value))
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		t.Fatal(err)
	}
	return out, state
}

// threeFiles writes a.txt, b.txt (its last line without newline, a CRLF line) and c.txt of
// n lines each into a new directory and returns the glob of them and every "file:line".
func threeFiles(t *testing.T, n int) (string, []string) {
	dir := t.TempDir()
	var want []string
	for _, f := range []string{"a.txt", "b.txt", "c.txt"} {
		var b strings.Builder
		for i := range n {
			line := fmt.Sprintf(`{"file":%q,"i":%d,"ts":%d}`, f, i, 1000+i)
			want = append(want, f+":"+line)
			b.WriteString(line)
			switch {
			case f == "b.txt" && i == n-1:
			case f == "b.txt" && i == 1:
				b.WriteString("\r\n")
			default:
				b.WriteString("\n")
			}
		}
		writeFile(t, filepath.Join(dir, f), b.String())
	}
	writeFile(t, filepath.Join(dir, "skip.log"), "not matched\n")
	return filepath.Join(dir, "*.txt"), want
}

// TestFileSourceReadsEachFileOnceInOrderByItsSubtask: in a BATCH job every line of every
// matching file is emitted once, by the file's subtask, in file order; a CRLF's \r and the
// newline are not in the value; the last line without newline is emitted; Run returns.
func TestFileSourceReadsEachFileOnceInOrderByItsSubtask(t *testing.T) {
	glob, want := threeFiles(t, 50)
	for _, par := range []int32{1, 2, 3} {
		var all []string
		byFile := map[string]int32{}
		for sub := range par {
			got, _ := runFiles(t, fileSourceOp(glob, nil), sub, par, nil, 0)
			for _, l := range got {
				f, _, _ := strings.Cut(l, ":")
				if s, ok := byFile[f]; ok && s != sub {
					t.Fatalf("parallelism %d: %s read by subtasks %d and %d", par, f, s, sub)
				}
				byFile[f] = sub
			}
			all = append(all, got...)
		}
		slices.SortStableFunc(all, func(a, b string) int { return strings.Compare(a[:5], b[:5]) }) // by file, keeping each file's order
		if !slices.Equal(all, want) {
			t.Fatalf("parallelism %d: %d lines\n%q\nwant %d\n%q", par, len(all), all, len(want), want)
		}
	}
}

// TestFileSourceRestoreResumesAfterTheLastLineBeforeTheBarrier: a source restored from the
// state of a barrier taken after k records (mid-file, at a file's end, at 0) emits exactly
// the records after them: none lost, none repeated.
func TestFileSourceRestoreResumesAfterTheLastLineBeforeTheBarrier(t *testing.T) {
	glob, _ := threeFiles(t, 20)
	for _, par := range []int32{1, 2} {
		for sub := range par {
			full, _ := runFiles(t, fileSourceOp(glob, nil), sub, par, nil, 0)
			for _, k := range []int{1, 7, 19, 20, 21, len(full) - 1} {
				if k >= len(full) {
					continue
				}
				before, state := runFiles(t, fileSourceOp(glob, nil), sub, par, nil, k)
				after, _ := runFiles(t, fileSourceOp(glob, nil), sub, par, state, 0)
				if got := append(before, after...); !slices.Equal(got, full) {
					t.Fatalf("subtask %d/%d stopped at %d (state %s): %d+%d lines, want %d\n%q", sub, par, k, state, len(before), len(after), len(full), got)
				}
			}
		}
	}
}

// TestFileSourceEventTimeFromJSONLines: with event_time at "ts" each record's time is its
// line's ts; the watermarks follow and the last is MaxWatermark.
func TestFileSourceEventTimeFromJSONLines(t *testing.T) {
	glob, _ := threeFiles(t, 5)
	op := fileSourceOp(glob, nil)
	op.EventTime = &pb.EventTime{TimePath: "ts"}
	src, err := NewSource(op, Info{Parallelism: 1, JobType: pb.JobType_JOB_TYPE_BATCH})
	if err != nil {
		t.Fatal(err)
	}
	var times []int64
	var last Record
	if err := src.Run(context.Background(), func(r Record) error {
		if !r.Watermark {
			times = append(times, r.Time)
		}
		last = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []int64{1000, 1001, 1002, 1003, 1004}
	want = append(append(want, want...), want...)
	if !slices.Equal(times, want) || !last.Watermark || last.Time != MaxWatermark {
		t.Fatalf("times %v, want %v; last %+v", times, want, last)
	}
}

// TestFileSourceRefusesALineOverItsBound: a line longer than max_line_bytes fails the task
// with ErrLineTooLong, naming the file, the line's offset and the limit.
func TestFileSourceRefusesALineOverItsBound(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.txt"), "0123456789\n01234567890\n")
	src, err := NewSource(fileSourceOp(filepath.Join(dir, "*.txt"), func(f *pb.FileSource) { f.MaxLineBytes = 10 }), Info{Parallelism: 1, JobType: pb.JobType_JOB_TYPE_BATCH})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = src.Run(context.Background(), func(Record) error { n++; return nil })
	if !errors.Is(err, ErrLineTooLong) || !strings.Contains(err.Error(), "a.txt, the line at byte 11") || !strings.Contains(err.Error(), "max_line_bytes 10") || n != 1 {
		t.Fatalf("%d records, error %v: want 1 and ErrLineTooLong at byte 11 naming max_line_bytes 10", n, err)
	}
}

// streamingFiles runs a STREAMING file source until stop; its records are seen by lines().
type streamingFiles struct {
	mu    sync.Mutex
	lines []string
	snap  func() // called on the task's goroutine before the next record
	state []byte
	done  chan error
	stop  context.CancelFunc
}

func startStreaming(t *testing.T, op *pb.Operator, restored []byte) *streamingFiles {
	t.Helper()
	src, err := NewSource(op, Info{Parallelism: 1, Restored: restored})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &streamingFiles{done: make(chan error, 1), stop: cancel}
	go func() {
		s.done <- src.Run(ctx, func(r Record) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.snap != nil {
				st, err := src.SnapshotState()
				if err != nil {
					return err
				}
				s.state = st
				s.snap()
				s.snap = nil
				return errors.New("stop at the barrier")
			}
			s.lines = append(s.lines, string(r.Key)+":"+string(r.Value))
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-s.done })
	return s
}

func (s *streamingFiles) waitFor(t *testing.T, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		got := slices.Clone(s.lines)
		s.mu.Unlock()
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lines %q, want %q", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFileSourceStreamingPicksUpNewFilesAndAppendedLines: a STREAMING source reads the lines
// appended to its files (a line once its newline is written) and files created while it
// runs; restored from a barrier's state it goes on after the last line before it.
func TestFileSourceStreamingPicksUpNewFilesAndAppendedLines(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	writeFile(t, a, "a1\na2\n")
	op := fileSourceOp(filepath.Join(dir, "*.log"), nil)
	s := startStreaming(t, op, nil)
	s.waitFor(t, []string{"a.log:a1", "a.log:a2"})
	appendFile(t, a, "a3\na4-part")
	s.waitFor(t, []string{"a.log:a1", "a.log:a2", "a.log:a3"})
	appendFile(t, a, "ial\n")
	writeFile(t, b, "b1\n")
	s.waitFor(t, []string{"a.log:a1", "a.log:a2", "a.log:a3", "a.log:a4-partial", "b.log:b1"})

	stopped := make(chan struct{})
	s.mu.Lock()
	s.snap = func() { close(stopped) }
	s.mu.Unlock()
	appendFile(t, b, "b2\nb3\n")
	<-stopped
	if err := <-s.done; err == nil || !strings.Contains(err.Error(), "stop at the barrier") {
		t.Fatalf("run: %v", err)
	}
	s.done <- nil // for the cleanup

	appendFile(t, a, "a5\n")
	r := startStreaming(t, op, s.state)
	r.waitFor(t, []string{"a.log:a5", "b.log:b2", "b.log:b3"})
}

// TestFileSourceSnapshotOfTheLineInFlight: a barrier in front of the line being emitted keeps
// its start (its split's position is the line's), one after it (in front of a watermark the
// line made due) keeps its end.
func TestFileSourceSnapshotOfTheLineInFlight(t *testing.T) {
	s := newFileSource(&pb.FileSource{Path: "*"}, Info{Parallelism: 1})
	s.offsets["a"], s.offsets["b"] = 0, 7
	s.cur = fileLine{file: "a", start: 0, end: 5, pos: 3, set: true}
	for _, c := range []struct {
		next int64
		want string
	}{{3, `{"files":{"a":0,"b":7}}`}, {4, `{"files":{"a":5,"b":7}}`}} {
		b, err := s.snapshotSource([]Split{{Next: c.next}})
		if err != nil || string(b) != c.want {
			t.Fatalf("split at %d: %s %v, want %s", c.next, b, err, c.want)
		}
	}
}

// BenchmarkFileSource: the cost of a line of 100 bytes through a BATCH file source (read,
// split, emitted as a record), from a file of 100,000 lines.
func BenchmarkFileSource(b *testing.B) {
	dir := b.TempDir()
	line := strings.Repeat("x", 99) + "\n"
	const lines = 100_000
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte(strings.Repeat(line, lines)), 0o644); err != nil {
		b.Fatal(err)
	}
	op := fileSourceOp(filepath.Join(dir, "*.txt"), nil)
	b.SetBytes(int64(len(line)) * lines)
	b.ReportAllocs()
	for b.Loop() {
		src, err := NewSource(op, Info{Parallelism: 1, JobType: pb.JobType_JOB_TYPE_BATCH})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		if err := src.Run(context.Background(), func(Record) error { n++; return nil }); err != nil || n != lines {
			b.Fatalf("%d lines, %v", n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
}
