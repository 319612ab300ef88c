package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/testkit/wasmbuild"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestArtifactCommands runs `jmnode artifact put/list/rm` and `job submit` of a spec naming a
// module by path against three JobMaster processes and one TaskManager: a 16 MiB artifact (the
// default limit) is put through a follower, with progress, listed, and read back from another
// follower byte for byte (both timed); one byte more is refused naming the limit; a spec whose
// wasm vertex names a file has it uploaded and replaced by its hash; rm of the artifact that
// job uses is refused naming the job, and succeeds once it is cancelled.
func TestArtifactCommands(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	o := defaultRaftProcs
	o.TMs = 1
	d := newProcessCluster(t, o)
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var followers []string
	for _, p := range d.JMs {
		if p.Addrs.GRPC != leader.LeaderGrpcAddress {
			followers = append(followers, p.Addrs.GRPC)
		}
	}
	jmnode := func(args ...string) (string, string, error) {
		var out, errb bytes.Buffer
		cmd := exec.Command(d.Bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}

	data := make([]byte, fsm.DefaultArtifactMaxBytes)
	for i := range data {
		data[i] = byte(i*131) ^ byte(i>>9)
	}
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	file := filepath.Join(d.dir, "module.wasm")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, stderr string
	var took time.Duration
	// Every JobMaster must gossip the artifact level first: until then the put is refused,
	// naming it.
	testcluster.WaitFor(t, 60*time.Second, "artifact put through the follower "+followers[0], func() (bool, string) {
		start := time.Now()
		out, stderr, err = jmnode("artifact", "put", file, "--addr", followers[0], "--timeout", "2m")
		took = time.Since(start)
		if err != nil && !strings.Contains(stderr, "FSM level") {
			t.Fatalf("artifact put: %v\n%s%s", err, out, stderr)
		}
		return err == nil, stderr
	})
	t.Logf("artifact put of %d bytes through a follower: %v\n%s%s", len(data), took.Round(time.Millisecond), out, stderr)
	if !strings.Contains(out, sha) || !strings.Contains(out, fmt.Sprint(len(data))+" bytes") || !strings.Contains(stderr, "bytes sent") {
		t.Fatalf("artifact put printed:\n%s%s", out, stderr)
	}

	// The other follower serves it once it applied the commit (a majority had when put answered).
	var got []byte
	testcluster.WaitFor(t, 30*time.Second, "GetArtifact from the other follower "+followers[1], func() (bool, string) {
		start := time.Now()
		got, err = readArtifact(d.client(followers[1]), sha)
		took = time.Since(start)
		return err == nil, fmt.Sprint(err)
	})
	if !bytes.Equal(got, data) {
		t.Fatalf("GetArtifact from %s: %d bytes that differ from the %d put", followers[1], len(got), len(data))
	}
	t.Logf("GetArtifact of %d bytes from the other follower: %v", len(got), took.Round(time.Millisecond))

	out, stderr, err = jmnode("artifact", "list", "--addr", leader.LeaderGrpcAddress)
	if err != nil || !strings.Contains(out, sha) || !strings.Contains(out, fmt.Sprint(len(data))) {
		t.Fatalf("artifact list: %v\n%s%s", err, out, stderr)
	}
	t.Logf("artifact list:\n%s", out)

	big := filepath.Join(d.dir, "big.wasm")
	if err := os.WriteFile(big, append(data, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, err = jmnode("artifact", "put", big, "--addr", followers[0], "--quiet")
	if err == nil || !strings.Contains(stderr, "max_bytes") || !strings.Contains(stderr, fmt.Sprint(len(data)+1)) || !strings.Contains(stderr, fmt.Sprint(len(data))) {
		t.Fatalf("artifact put over the limit: %v\n%s%s", err, out, stderr)
	}
	t.Logf("over the limit: %s", strings.TrimSpace(stderr))

	// A spec naming a small module by path, relative to the spec, with more subtasks than the
	// TaskManager has slots: it waits for slots (not terminal) while the test removes.
	small := filepath.Join(d.dir, "specs", "fn.wasm")
	if err := os.MkdirAll(filepath.Dir(small), 0o755); err != nil {
		t.Fatal(err)
	}
	fn := wasmbuild.Shape{Functions: []string{"map"}}.Bytes() // exports map: the check at submit passes it
	if err := os.WriteFile(small, fn, 0o644); err != nil {
		t.Fatal(err)
	}
	smallSum := sha256.Sum256(fn)
	smallSHA := hex.EncodeToString(smallSum[:])
	jg := testcluster.StreamingChain("wasm-spec", 8, 10, 0)
	jg.JobId = newJobID()
	jg.Vertices[1].Operator = &pb.Operator{Kind: &pb.Operator_Wasm{Wasm: &pb.WasmOperator{Artifact: "fn.wasm", Function: "map", Kind: pb.WasmKind_WASM_KIND_MAP}}}
	b, err := protojson.Marshal(jg)
	if err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(d.dir, "specs", "job.json")
	if err := os.WriteFile(spec, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, err = jmnode("job", "submit", spec, "--addr", followers[1], "--timeout", "60s")
	if err != nil || !strings.Contains(stderr, "uploaded "+small+" as artifact "+smallSHA) || !strings.Contains(stderr, `"fn.wasm" replaced by `+smallSHA) {
		t.Fatalf("job submit of a spec naming a module by path: %v\n%s%s", err, out, stderr)
	}
	t.Logf("job submit:\n%s%s", stderr, out)
	rec, err := d.waitJob(ctx, jg.JobId, 30*time.Second, func(r *pb.JobRecord) bool { return r != nil })
	if err != nil || rec.JobGraph.Vertices[1].Operator.GetWasm().Artifact != smallSHA {
		t.Fatalf("the submitted job: %v %v", rec.GetJobGraph().GetVertices(), err)
	}

	out, stderr, err = jmnode("artifact", "rm", smallSHA, "--addr", followers[0])
	if err == nil || !strings.Contains(stderr, jg.JobId) || !strings.Contains(stderr, "FailedPrecondition") {
		t.Fatalf("artifact rm of an artifact in use: %v\n%s%s", err, out, stderr)
	}
	t.Logf("rm in use: %s", strings.TrimSpace(stderr))
	if out, stderr, err = jmnode("job", "cancel", jg.JobId, "--addr", leader.LeaderGrpcAddress); err != nil {
		t.Fatalf("job cancel: %v\n%s%s", err, out, stderr)
	}
	testcluster.WaitFor(t, 30*time.Second, "artifact rm once the job is cancelled", func() (bool, string) {
		out, stderr, err = jmnode("artifact", "rm", smallSHA, "--addr", followers[0])
		return err == nil && strings.Contains(out, "removed "+smallSHA), out + stderr
	})
	out, _, _ = jmnode("artifact", "list", "--addr", leader.LeaderGrpcAddress, "--consistent")
	if strings.Contains(out, smallSHA) || !regexp.MustCompile(`(?m)^1 artifacts`).MatchString(out) {
		t.Fatalf("artifact list after the removal:\n%s", out)
	}
	for _, args := range [][]string{{"artifact", "--help"}, {"artifact", "put", "--help"}, {"artifact", "list", "--help"}, {"artifact", "rm", "--help"}} {
		if out, stderr, err := jmnode(args...); err != nil || !strings.Contains(out+stderr, "artifact") {
			t.Errorf("jmnode %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
	}
}

// readArtifact reads an artifact through GetArtifact.
func readArtifact(c *conn, sha string) ([]byte, error) {
	defer c.cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := c.artifacts().GetArtifact(ctx, &pb.GetArtifactRequest{Sha256: sha})
	if err != nil {
		return nil, err
	}
	var out []byte
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m.Data...)
	}
}
