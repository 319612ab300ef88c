package jobmaster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/jobmaster"
	tc "github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/testkit/wasmbuild"
	"github.com/jmcluster/jmcluster/transport/pb"
	"github.com/jmcluster/jmcluster/wasmhost"
)

// moduleBytes is a module of n bytes that exports the function "map" (a wasmbuild.Shape:
// the check at submit passes it, a task of it fails), seed varying its padding, and its
// sha256.
func moduleBytes(n int, seed byte) ([]byte, string) {
	b := wasmbuild.Shape{Functions: []string{"map"}, Size: n, Seed: seed}.Bytes()
	return b, wasmhost.Sum(b)
}

// getArtifact reads an artifact from the JobMaster at addr.
func getArtifact(ctx context.Context, c *tc.Cluster, addr, sha string) ([]byte, error) {
	stream, err := pb.NewArtifactServiceClient(c.Conn(addr)).GetArtifact(ctx, &pb.GetArtifactRequest{Sha256: sha})
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

// TestArtifactSurvivesLeaderAndUploaderLoss: an artifact of several chunks put through a
// follower of three JobMasters is acknowledged once committed; once the third replica applied
// it, the leader and that follower are killed at once, and the survivor serves its exact
// bytes; a TaskManager fetches it from there, once (one download for concurrent fetches, none
// for the next ones, none after a restart: its disk cache), and checks it. The two come back
// and hold it too.
func TestArtifactSurvivesLeaderAndUploaderLoss(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3, TMs: 1})
	// 4 MiB, 8 chunks (the 16 MiB upload is measured by cmd/jmnode's TestArtifactCommands on
	// processes built without the race detector).
	data, sha := moduleBytes(8*fsm.ArtifactChunkSize, 1)
	l, f := c.Leader(), c.Follower()
	start := time.Now()
	resp := putArtifact(t, c, f, data)
	t.Logf("put %d bytes through %s (leader %s) in %v: index %d", len(data), f.ID, l.ID, time.Since(start).Round(time.Millisecond), resp.Index)
	if resp.Sha256 != sha || resp.Size != int64(len(data)) || resp.Existed || resp.StoredAt == 0 {
		t.Fatalf("answer: %v", resp)
	}
	var s *tc.JM
	for _, j := range c.Live() {
		if j != l && j != f {
			s = j
		}
	}
	tc.WaitFor(t, 30*time.Second, s.ID+" applying the artifact", func() (bool, string) {
		_, idx := s.A.State.HashAt()
		return s.A.State.HasArtifact(sha), fmt.Sprintf("applied index %d, the commit is %d", idx, resp.Index)
	})

	c.KillJM(l)
	c.KillJM(f)
	var got []byte
	tc.WaitFor(t, 30*time.Second, "GetArtifact on the survivor "+s.ID, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		start := time.Now()
		got, err = getArtifact(ctx, c, s.GRPCAddr, sha)
		if err == nil {
			t.Logf("GetArtifact of %d bytes from %s in %v", len(got), s.ID, time.Since(start).Round(time.Millisecond))
		}
		return err == nil, fmt.Sprint(err)
	})
	if !bytes.Equal(got, data) {
		t.Fatalf("%s served %d bytes that differ from the %d uploaded", s.ID, len(got), len(data))
	}

	tm := c.TMs[0].A.TM
	var wg sync.WaitGroup
	errs := make([]error, 4)
	start = time.Now()
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := tm.Artifact(ctxT(t), sha)
			if err == nil && !bytes.Equal(got, data) {
				err = fmt.Errorf("%d bytes that differ", len(got))
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	t.Logf("a TaskManager fetched it (4 concurrent asks) in %v", time.Since(start).Round(time.Millisecond))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("TaskManager fetch %d: %v", i, err)
		}
	}
	if _, err := tm.Artifact(ctxT(t), sha); err != nil || tm.ArtifactDownloads() != 1 {
		t.Fatalf("downloads after 5 fetches: %d (%v), want 1", tm.ArtifactDownloads(), err)
	}
	// A restarted TaskManager finds it in its disk cache (.artifacts under its work dir); a
	// cached file that does not match its hash is fetched again.
	c.KillTM(c.TMs[0])
	c.StartTM(c.TMs[0])
	tm = c.TMs[0].A.TM
	if got, err := tm.Artifact(ctxT(t), sha); err != nil || !bytes.Equal(got, data) || tm.ArtifactDownloads() != 0 {
		t.Fatalf("after a restart: %d bytes, %v, %d downloads; want the bytes from the disk cache", len(got), err, tm.ArtifactDownloads())
	}
	c.KillTM(c.TMs[0])
	cached := filepath.Join(c.TMs[0].WorkDir, ".artifacts", sha)
	if err := os.WriteFile(cached, []byte("not it"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.StartTM(c.TMs[0])
	tm = c.TMs[0].A.TM
	if got, err := tm.Artifact(ctxT(t), sha); err != nil || !bytes.Equal(got, data) || tm.ArtifactDownloads() != 1 {
		t.Fatalf("with a corrupt cached file: %d bytes, %v, %d downloads; want it fetched again", len(got), err, tm.ArtifactDownloads())
	}
	_, unknown := moduleBytes(10, 2)
	if _, err := tm.Artifact(ctxT(t), unknown); err == nil || !strings.Contains(err.Error(), unknown) {
		t.Fatalf("fetch of an artifact no JobMaster holds: %v", err)
	}

	c.StartJM(l)
	c.StartJM(f)
	nl := c.Leader()
	var list *pb.ListArtifactsResponse
	tc.WaitFor(t, 30*time.Second, "a consistent ListArtifacts naming it", func() (bool, string) {
		var err error
		list, err = pb.NewArtifactServiceClient(c.Conn(nl.GRPCAddr)).ListArtifacts(ctxT(t), &pb.ListArtifactsRequest{Consistent: true})
		return err == nil && len(list.GetArtifacts()) == 1 && list.Artifacts[0].Sha256 == sha, fmt.Sprint(list, err)
	})
	for _, j := range []*tc.JM{l, f} {
		tc.WaitFor(t, 30*time.Second, j.ID+" holding the artifact again", func() (bool, string) {
			return j.A.State.HasArtifact(sha), ""
		})
	}
}

// TestArtifactRefusals: an artifact over the configured limit is refused at once, naming the
// limit and the sizes; a job naming an artifact the state does not hold is refused naming the
// vertex and the hash; the removal of an artifact a job that is not terminal uses is refused
// naming the job, and succeeds once the job is cancelled.
func TestArtifactRefusals(t *testing.T) {
	const limit = 1 << 20
	c := tc.New(t, tc.Options{JMs: 3, JobMaster: func(jc *jobmaster.Config) { jc.ArtifactMaxBytes = limit }})
	small, sha := moduleBytes(1000, 3)
	putArtifact(t, c, c.Follower(), small)
	if again := putArtifact(t, c, c.Leader(), small); !again.Existed {
		t.Fatalf("a second put of the same bytes: %v, want existed", again)
	}

	big, bigSHA := moduleBytes(limit+1, 4)
	art := pb.NewArtifactServiceClient(c.Conn(c.Follower().GRPCAddr))
	_, err := jmserver.UploadArtifact(ctxT(t), art, bytes.NewReader(big), bigSHA, int64(len(big)), nil)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "max_bytes") ||
		!strings.Contains(err.Error(), fmt.Sprint(limit+1)) || !strings.Contains(err.Error(), fmt.Sprint(limit)) {
		t.Fatalf("an artifact over the limit: %v, want RESOURCE_EXHAUSTED naming max_bytes, %d and %d", err, limit+1, limit)
	}
	_, wrongSHA := moduleBytes(1000, 5)
	_, err = jmserver.UploadArtifact(ctxT(t), art, bytes.NewReader(small), wrongSHA, int64(len(small)), nil)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), wrongSHA) {
		t.Fatalf("bytes that do not match the declared sha256: %v, want INVALID_ARGUMENT naming it", err)
	}
	if ids := c.Leader().A.State.ArtifactUploads(); len(ids) != 0 {
		t.Fatalf("refused uploads left in the state: %v", ids)
	}

	cl := c.Client(c.Follower())
	_, missing := moduleBytes(10, 6)
	_, err = cl.SubmitJob(ctxT(t), &pb.SubmitJobRequest{JobGraph: wasmChain("missing", missing)})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), `"map"`) {
		t.Fatalf("a job naming an unknown artifact: %v, want FAILED_PRECONDITION naming vertex \"map\" and %s", err, missing)
	}
	sub, err := cl.SubmitJob(ctxT(t), &pb.SubmitJobRequest{JobGraph: wasmChain("uses", sha)})
	if err != nil {
		t.Fatalf("a job naming a stored artifact: %v", err)
	}
	_, err = art.RemoveArtifact(ctxT(t), &pb.RemoveArtifactRequest{Sha256: sha})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), sub.JobId) {
		t.Fatalf("removal of an artifact in use: %v, want FAILED_PRECONDITION naming %s", err, sub.JobId)
	}
	if _, err := cl.CancelJob(ctxT(t), &pb.CancelJobRequest{JobId: sub.JobId}); err != nil {
		t.Fatal(err)
	}
	tc.WaitFor(t, 30*time.Second, "the removal once the job is cancelled", func() (bool, string) {
		_, err := art.RemoveArtifact(ctxT(t), &pb.RemoveArtifactRequest{Sha256: sha})
		return err == nil, fmt.Sprint(err)
	})
	if _, err := getArtifact(ctxT(t), c, c.Leader().GRPCAddr, sha); status.Code(err) != codes.NotFound {
		t.Fatalf("GetArtifact after the removal: %v, want NOT_FOUND", err)
	}
}

// wasmChain is source -> wasm map -> sink, its wasm vertex naming artifact.
func wasmChain(name, artifact string) *pb.JobGraph {
	jg := tc.StreamingChain(name, 1, 10, 0)
	for _, v := range jg.Vertices {
		if v.Id == "map" {
			v.Operator = &pb.Operator{Kind: &pb.Operator_Wasm{Wasm: &pb.WasmOperator{Artifact: artifact, Function: "map", Kind: pb.WasmKind_WASM_KIND_MAP}}}
		}
	}
	return jg
}

// TestArtifactUploadCutByALeaderKillLeavesNothing: an upload whose leader is killed after its
// first chunk is never visible, and the next leader's retention aborts it (its bytes stop
// counting against the limits); an artifact no job names is removed once it was stored more
// than RetainJobAge ago, one a job names is kept.
func TestArtifactUploadCutByALeaderKillLeavesNothing(t *testing.T) {
	const age = 3 * time.Second
	c := tc.New(t, tc.Options{JMs: 3, JobMaster: func(jc *jobmaster.Config) {
		jc.RetainJobAge, jc.RetentionInterval = age, 200*time.Millisecond
	}})
	kept, keptSHA := moduleBytes(100, 7)
	putArtifact(t, c, c.Follower(), kept)
	if _, err := c.Client(c.Leader()).SubmitJob(ctxT(t), &pb.SubmitJobRequest{JobGraph: wasmChain("keeps", keptSHA)}); err != nil {
		t.Fatal(err)
	}
	unused, unusedSHA := moduleBytes(100, 8)
	putArtifact(t, c, c.Follower(), unused)

	data, sha := moduleBytes(3*fsm.ArtifactChunkSize, 9)
	l := c.Leader()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := pb.NewArtifactServiceClient(c.Conn(l.GRPCAddr)).PutArtifact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.PutArtifactRequest{Sha256: sha, Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.PutArtifactRequest{Data: data[:fsm.ArtifactChunkSize]}); err != nil {
		t.Fatal(err)
	}
	var s *tc.JM
	tc.WaitFor(t, 30*time.Second, "the upload's first chunk applied on a follower", func() (bool, string) {
		for _, j := range c.Live() {
			if j != l && len(j.A.State.ArtifactUploads()) == 1 {
				s = j
				return true, ""
			}
		}
		return false, "no follower holds the upload"
	})
	c.KillJM(l)
	nl := c.Leader()
	tc.WaitFor(t, 30*time.Second, "the new leader "+nl.ID+" aborting the cut upload", func() (bool, string) {
		ids := nl.A.State.ArtifactUploads()
		return len(ids) == 0, fmt.Sprintf("uploads %v (seen on %s before the kill)", ids, s.ID)
	})
	if nl.A.State.HasArtifact(sha) {
		t.Fatal("the cut upload is visible")
	}
	tc.WaitFor(t, 30*time.Second, "the unused artifact removed after "+age.String(), func() (bool, string) {
		return !nl.A.State.HasArtifact(unusedSHA), ""
	})
	if !nl.A.State.HasArtifact(keptSHA) {
		t.Fatal("the retention removed an artifact a job names")
	}
}

// putArtifact uploads data through the JobMaster j (testcluster.PutArtifact) and returns the
// response.
func putArtifact(t *testing.T, c *tc.Cluster, j *tc.JM, data []byte) *pb.PutArtifactResponse {
	t.Helper()
	_, resp := c.PutArtifact(t, j, data)
	return resp
}
