package taskmanager

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestSubmitTaskRefusesSinkPathsOutsideTheWorkDir: descriptors whose sink path leads outside
// the TM's work dir — absolute, with "..", escaping through the vertex id it expands, or
// through a symlink in the work dir that points out — reach a real TM over gRPC and are
// refused with INVALID_ARGUMENT before anything is opened: no task starts and no file appears
// outside the work dir.
func TestSubmitTaskRefusesSinkPathsOutsideTheWorkDir(t *testing.T) {
	base := t.TempDir()
	work := filepath.Join(base, "x", "y", "work")
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, func(c *Config) { c.WorkDir = work })
	c := client(t, tm)
	if err := os.Symlink(outside, filepath.Join(work, "abs-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../outside", filepath.Join(work, "rel-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../outside/victim.json", filepath.Join(work, "victim.json")); err != nil {
		t.Fatal(err)
	}
	fileSink := func(p string) *pb.Operator {
		return &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: p}}}
	}
	cases := []struct {
		name, vertex string
		op           *pb.Operator
		never        []string // must not exist afterwards
		want         string
	}{
		{"absolute", "sink", fileSink("/some/absolute/path-{subtask}.txt"), []string{"/some/absolute/path-0.txt"}, "is absolute"},
		{"absolute into a known dir", "sink", fileSink(filepath.Join(outside, "abs-{subtask}.txt")), []string{filepath.Join(outside, "abs-0.txt")}, "is absolute"},
		{"dot-dot", "sink", fileSink("../../escaped-{subtask}.txt"), []string{filepath.Join(base, "x", "escaped-0.txt")}, `".." element`},
		{"dot-dot through the vertex id", "..", fileSink("{vertex}/{vertex}/v-{subtask}.txt"), []string{filepath.Join(base, "x", "v-0.txt")}, `expands to "../../v-0.txt"`},
		{"absolute symlink in the work dir", "sink", fileSink("abs-link/l-{subtask}.txt"), []string{filepath.Join(outside, "l-0.txt")}, "resolves outside the work dir"},
		{"relative symlink in the work dir", "sink", checksumOp("rel-link/sub/r-{subtask}.json"), []string{filepath.Join(outside, "sub")}, "resolves outside the work dir"},
		{"the file itself a symlink out", "sink", fileSink("victim.json"), []string{filepath.Join(outside, "victim.json")}, "resolves outside the work dir"},
	}
	for i, tc := range cases {
		d := deploy("job", tc.vertex, 0, 1, "attempt-"+tc.name, int32(i%4), tc.op, gate("r", pipelined, channel("r", 0, 0, "", "")))
		_, err := c.SubmitTask(t.Context(), &pb.SubmitTaskRequest{Epoch: 1, Task: d})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "path") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want INVALID_ARGUMENT naming the path: ...%s...", tc.name, err, tc.want)
		}
		for _, p := range tc.never {
			if _, err := os.Lstat(p); !os.IsNotExist(err) {
				t.Errorf("%s: %s exists (%v)", tc.name, p, err)
			}
		}
	}
	if n := len(tm.Tasks()); n != 0 || tm.FreeSlots() != 4 {
		t.Fatalf("refused descriptors started %d tasks (free slots %d)", n, tm.FreeSlots())
	}
	if ents, err := os.ReadDir(outside); err != nil || len(ents) != 0 {
		t.Fatalf("written outside the work dir: %v %v", ents, err)
	}
	if ents, err := os.ReadDir(filepath.Join(base, "x")); err != nil || len(ents) != 1 {
		t.Fatalf("written next to the work dir: %v %v", ents, err)
	}

	// The same sink with a clean relative path runs and writes inside the work dir.
	d := deploy("job", "sink", 0, 1, "good", 0, fileSink("out/good-{subtask}.txt"), gate("r", pipelined, channel("r", 0, 0, "", "")))
	submit(t, c, 1, d)
	jm.waitState(t, "good", running)
	if _, err := os.Stat(filepath.Join(work, "out", "good-0.txt")); err != nil {
		t.Fatalf("good sink file: %v", err)
	}
}
