package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

const (
	artBeginT  = pb.CommandType_COMMAND_TYPE_ARTIFACT_BEGIN
	artChunkT  = pb.CommandType_COMMAND_TYPE_ARTIFACT_CHUNK
	artCommitT = pb.CommandType_COMMAND_TYPE_ARTIFACT_COMMIT
	artAbortT  = pb.CommandType_COMMAND_TYPE_ARTIFACT_ABORT
	artRemoveT = pb.CommandType_COMMAND_TYPE_ARTIFACT_REMOVE
)

func defaultArtifactLimits() *pb.ArtifactLimits {
	return &pb.ArtifactLimits{MaxBytes: DefaultArtifactMaxBytes, MaxTotalBytes: DefaultArtifactMaxTotalBytes, MaxArtifacts: DefaultArtifactMaxCount}
}

// artifactBytes is n deterministic bytes and their sha256.
func artifactBytes(n int, seed byte) ([]byte, string) {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

// upload begins an upload of data under id and sends its chunks, without committing it.
func (h *harness) upload(id string, data []byte, sha string) {
	h.t.Helper()
	h.uploadChunked(id, int64(len(data)), data, sha, ArtifactChunkSize)
}

// uploadPart begins an upload of size bytes and sends data, the first part of them.
func (h *harness) uploadPart(id string, size int64, data []byte, sha string) {
	h.t.Helper()
	h.uploadChunked(id, size, data, sha, ArtifactChunkSize)
}

// uploadChunked is uploadPart in chunks of at most chunk bytes.
func (h *harness) uploadChunked(id string, size int64, data []byte, sha string, chunk int) {
	h.t.Helper()
	h.ok(artBeginT, &pb.ArtifactBeginCommand{UploadId: id, Sha256: sha, Size: size, Limits: defaultArtifactLimits(), Timestamp: 500})
	for i := 0; len(data) > 0; i++ {
		n := min(len(data), chunk)
		h.ok(artChunkT, &pb.ArtifactChunkCommand{UploadId: id, Index: int32(i), Data: data[:n]})
		data = data[n:]
	}
}

// wasmJob is a source -> wasm -> sink job whose wasm vertex names artifact.
func wasmJob(id, artifact string) *pb.JobGraph {
	jg := forwardJob(id, 3, 1)
	jg.Vertices[1].Operator = &pb.Operator{Kind: &pb.Operator_Wasm{Wasm: &pb.WasmOperator{
		Artifact: artifact, Function: "map", Kind: pb.WasmKind_WASM_KIND_MAP}}}
	return jg
}

// artifactScript is the artifact part of script(): every command type, accepted and refused.
// Its artifacts are small (the fuzz seeds hold the script), in chunks of 16 bytes.
func artifactScript(h *harness) {
	data, sha := artifactBytes(40, 1)
	h.uploadChunked("u1", 40, data, sha, 16)
	h.ok(artCommitT, &pb.ArtifactCommitCommand{UploadId: "u1", Timestamp: 600})
	other, otherSHA := artifactBytes(10, 2)
	h.upload("u2", other, otherSHA)
	h.ok(artCommitT, &pb.ArtifactCommitCommand{UploadId: "u2", Timestamp: 610})
	h.ok(artRemoveT, &pb.ArtifactRemoveCommand{Sha256: []string{otherSHA}})
	left, leftSHA := artifactBytes(32, 3)
	h.uploadChunked("u3", 32, left[:16], leftSHA, 16) // in progress: half sent
	h.upload("u4", other, otherSHA)
	h.ok(artAbortT, &pb.ArtifactAbortCommand{UploadIds: []string{"u4"}})
	h.apply(artCommitT, &pb.ArtifactCommitCommand{UploadId: "u3", Timestamp: 620}) // refused: short
	h.apply(artRemoveT, &pb.ArtifactRemoveCommand{Sha256: []string{leftSHA}})      // refused: unknown
}

// TestArtifactUploadIsInvisibleUntilCommitted: an upload's chunks are not an artifact; its
// commit makes the exact bytes readable, and a second upload of the same bytes is told it
// exists.
func TestArtifactUploadIsInvisibleUntilCommitted(t *testing.T) {
	h := newHarness(t)
	data, sha := artifactBytes(2*ArtifactChunkSize+17, 9)
	h.upload("u", data, sha)
	if h.f.HasArtifact(sha) {
		t.Fatal("an uncommitted upload is visible")
	}
	if list, uploads := h.f.Artifacts(); len(list) != 0 || uploads != 1 {
		t.Fatalf("before the commit: %d artifacts, %d uploads", len(list), uploads)
	}
	h.ok(artCommitT, &pb.ArtifactCommitCommand{UploadId: "u", Timestamp: 777})
	info, chunks, ok := h.f.Artifact(sha)
	if !ok || info.Size != int64(len(data)) || info.StoredAt != 777 || info.StoredIndex != h.index {
		t.Fatalf("stored: %+v %v", info, ok)
	}
	if got := bytes.Join(chunks, nil); !bytes.Equal(got, data) || len(chunks) != 3 {
		t.Fatalf("read back %d bytes in %d chunks, want %d bytes in 3", len(got), len(chunks), len(data))
	}
	if ids := h.f.ArtifactUploads(); len(ids) != 0 {
		t.Fatalf("uploads left after the commit: %v", ids)
	}
	res := h.ok(artBeginT, &pb.ArtifactBeginCommand{UploadId: "again", Sha256: sha, Size: int64(len(data)), Limits: defaultArtifactLimits()})
	if !res.Value.(*pb.ArtifactBeginResult).Exists || len(h.f.ArtifactUploads()) != 0 {
		t.Fatalf("a second upload of stored bytes: %v, uploads %v", res.Value, h.f.ArtifactUploads())
	}
	h.fails(artBeginT, &pb.ArtifactBeginCommand{UploadId: "again", Sha256: sha, Size: 5, Limits: defaultArtifactLimits()}, ErrArtifactMismatch)
}

// TestArtifactChecksumMismatchRefused: a commit whose bytes do not have the declared sha256,
// or are short, is refused without a trace; the upload is then aborted.
func TestArtifactChecksumMismatchRefused(t *testing.T) {
	h := newHarness(t)
	data, _ := artifactBytes(1000, 4)
	_, wrong := artifactBytes(1000, 5)
	h.upload("u", data, wrong)
	before := h.f.Hash()
	res := h.apply(artCommitT, &pb.ArtifactCommitCommand{UploadId: "u", Timestamp: 1})
	if !errors.Is(res.Err, ErrArtifactMismatch) || !strings.Contains(res.Err.Error(), wrong) {
		t.Fatalf("commit of mismatching bytes: %v", res.Err)
	}
	if h.f.Hash() != before || h.f.HasArtifact(wrong) {
		t.Fatal("a refused commit changed the state")
	}
	h.ok(artAbortT, &pb.ArtifactAbortCommand{UploadIds: []string{"u"}})
	if len(h.f.ArtifactUploads()) != 0 {
		t.Fatal("abort left the upload")
	}
	short, sha := artifactBytes(1000, 6)
	h.uploadPart("s", 1000, short[:600], sha)
	h.ok(artBeginT, &pb.ArtifactBeginCommand{UploadId: "t", Sha256: sha, Size: 1000, Limits: defaultArtifactLimits()})
	h.fails(artCommitT, &pb.ArtifactCommitCommand{UploadId: "t"}, ErrArtifactMismatch)
	h.fails(artChunkT, &pb.ArtifactChunkCommand{UploadId: "t", Index: 0, Data: make([]byte, 1001)}, ErrArtifactMismatch)
}

// TestArtifactCommandsRefuseBadInput: every refusal of the five commands, each without a trace.
func TestArtifactCommandsRefuseBadInput(t *testing.T) {
	h := newHarness(t)
	data, sha := artifactBytes(100, 7)
	lim := defaultArtifactLimits()
	h.fails(artBeginT, &pb.ArtifactBeginCommand{Sha256: sha, Size: 100, Limits: lim}, ErrInvalidCommand)
	h.fails(artBeginT, &pb.ArtifactBeginCommand{UploadId: "u", Sha256: strings.ToUpper(sha), Size: 100, Limits: lim}, ErrInvalidCommand)
	h.fails(artBeginT, &pb.ArtifactBeginCommand{UploadId: "u", Sha256: sha, Size: 0, Limits: lim}, ErrInvalidCommand)
	h.fails(artBeginT, &pb.ArtifactBeginCommand{UploadId: "u", Sha256: sha, Size: 100}, ErrInvalidCommand)
	h.uploadPart("u", 100, nil, sha)
	h.fails(artBeginT, &pb.ArtifactBeginCommand{UploadId: "u", Sha256: sha, Size: 100, Limits: lim}, ErrInvalidCommand)
	h.fails(artChunkT, &pb.ArtifactChunkCommand{UploadId: "nope", Data: data}, ErrUnknownUpload)
	h.fails(artChunkT, &pb.ArtifactChunkCommand{UploadId: "u", Index: 1, Data: data}, ErrInvalidCommand)
	h.fails(artChunkT, &pb.ArtifactChunkCommand{UploadId: "u", Index: 0}, ErrInvalidCommand)
	h.fails(artChunkT, &pb.ArtifactChunkCommand{UploadId: "u", Index: 0, Data: make([]byte, ArtifactChunkSize+1)}, ErrInvalidCommand)
	h.fails(artCommitT, &pb.ArtifactCommitCommand{UploadId: "nope"}, ErrUnknownUpload)
	h.fails(artAbortT, &pb.ArtifactAbortCommand{}, ErrInvalidCommand)
	h.fails(artAbortT, &pb.ArtifactAbortCommand{UploadIds: []string{"u", "u"}}, ErrInvalidCommand)
	h.fails(artAbortT, &pb.ArtifactAbortCommand{UploadIds: []string{"u", "nope"}}, ErrUnknownUpload)
	h.fails(artRemoveT, &pb.ArtifactRemoveCommand{}, ErrInvalidCommand)
	h.fails(artRemoveT, &pb.ArtifactRemoveCommand{Sha256: []string{sha}}, ErrUnknownArtifact)
}

// TestArtifactLimitsNamed: an upload over a limit is refused at its begin, the error naming the
// limit and the numbers; limits above the replicated ceilings are refused naming the ceiling.
func TestArtifactLimitsNamed(t *testing.T) {
	h := newHarness(t)
	small := &pb.ArtifactLimits{MaxBytes: 1000, MaxTotalBytes: 1500, MaxArtifacts: 2}
	begin := func(id string, size int64, seed byte) error {
		_, sha := artifactBytes(int(size), seed)
		before := h.f.Hash()
		res := h.apply(artBeginT, &pb.ArtifactBeginCommand{UploadId: id, Sha256: sha, Size: size, Limits: small})
		if res.Err != nil && h.f.Hash() != before {
			t.Fatalf("a refused begin changed the state")
		}
		return res.Err
	}
	cases := []struct {
		err  error
		want []string
	}{
		{begin("a", 1001, 1), []string{"1001 bytes", "limit of 1000", "max_bytes"}},
		{begin("b", 900, 2), nil},
		{begin("c", 700, 3), []string{"700 bytes", "900 stored or being uploaded", "limit of 1500", "max_total_bytes"}},
		{begin("d", 500, 4), nil},
		{begin("e", 1, 5), []string{"2 artifacts", "limit is 2", "max_artifacts"}},
	}
	for i, c := range cases {
		if c.want == nil {
			if c.err != nil {
				t.Fatalf("case %d: %v", i, c.err)
			}
			continue
		}
		if !errors.Is(c.err, ErrArtifactLimit) {
			t.Fatalf("case %d: %v, want ErrArtifactLimit", i, c.err)
		}
		for _, w := range c.want {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("case %d: %q does not say %q", i, c.err, w)
			}
		}
	}
	_, sha := artifactBytes(10, 8)
	res := h.apply(artBeginT, &pb.ArtifactBeginCommand{UploadId: "x", Sha256: sha, Size: 10,
		Limits: &pb.ArtifactLimits{MaxBytes: ArtifactCeilingBytes + 1, MaxTotalBytes: ArtifactCeilingTotalBytes + 1, MaxArtifacts: ArtifactCeilingCount + 1}})
	for _, w := range []string{"ArtifactCeilingBytes", "ArtifactCeilingTotalBytes", "ArtifactCeilingCount"} {
		if !errors.Is(res.Err, ErrInvalidCommand) || !strings.Contains(res.Err.Error(), w) {
			t.Errorf("limits above the ceilings: %v does not name %s", res.Err, w)
		}
	}
}

// TestArtifactRemoveRefusedInUse: a removal is refused, naming the jobs, while a job that is
// not terminal names the artifact in a wasm vertex; once the job is terminal it is removed.
func TestArtifactRemoveRefusedInUse(t *testing.T) {
	h := newHarness(t)
	data, sha := artifactBytes(300, 1)
	h.upload("u", data, sha)
	h.ok(artCommitT, &pb.ArtifactCommitCommand{UploadId: "u", Timestamp: 1})
	a, b := jobIDN(1), jobIDN(2)
	h.submit(wasmJob(a, sha))
	h.submit(wasmJob(b, sha))
	before := h.f.Hash()
	res := h.apply(artRemoveT, &pb.ArtifactRemoveCommand{Sha256: []string{sha}})
	if !errors.Is(res.Err, ErrArtifactInUse) || !strings.Contains(res.Err.Error(), a) || !strings.Contains(res.Err.Error(), b) {
		t.Fatalf("removal of an artifact in use: %v, want ErrArtifactInUse naming %s and %s", res.Err, a, b)
	}
	if h.f.Hash() != before {
		t.Fatal("a refused removal changed the state")
	}
	list, _ := h.f.Artifacts()
	if len(list) != 1 || len(list[0].Jobs) != 2 || len(list[0].ActiveJobs) != 2 || list[0].Jobs[0] != a {
		t.Fatalf("listing: %+v", list)
	}
	h.ok(cancelT, &pb.CancelJobCommand{JobId: a, Timestamp: 2}) // CREATED: CANCELED at once
	res = h.apply(artRemoveT, &pb.ArtifactRemoveCommand{Sha256: []string{sha}})
	if !errors.Is(res.Err, ErrArtifactInUse) || strings.Contains(res.Err.Error(), a) {
		t.Fatalf("with %s terminal: %v, want a refusal naming %s only", a, res.Err, b)
	}
	h.ok(cancelT, &pb.CancelJobCommand{JobId: b, Timestamp: 3})
	h.ok(artRemoveT, &pb.ArtifactRemoveCommand{Sha256: []string{sha}})
	if h.f.HasArtifact(sha) {
		t.Fatal("removed artifact still stored")
	}
	if got := JobArtifacts(wasmJob("x", sha)); len(got) != 1 || got[0] != sha {
		t.Fatalf("JobArtifacts: %v", got)
	}
}

// TestArtifactSnapshotRoundTrip: stored artifacts and uploads in progress survive a snapshot
// and restore with the same hash; the restored upload goes on and commits; a snapshot whose
// artifact bytes do not match its sha256 is refused.
func TestArtifactSnapshotRoundTrip(t *testing.T) {
	h := newHarness(t)
	artifactScript(h)
	stream := persist(t, h.f)
	g := New(testLogger(t))
	if err := g.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
		t.Fatal(err)
	}
	if g.Hash() != h.f.Hash() {
		t.Fatal("restored hash differs")
	}
	if ids := g.ArtifactUploads(); len(ids) != 1 || ids[0] != "u3" {
		t.Fatalf("restored uploads: %v", ids)
	}
	// Both go on alike from there: the rest of u3, then its commit.
	left, leftSHA := artifactBytes(32, 3)
	for _, f := range []*FSM{h.f, g} {
		k := &harness{t: t, f: f, index: h.index}
		k.ok(artChunkT, &pb.ArtifactChunkCommand{UploadId: "u3", Index: 1, Data: left[16:]})
		k.ok(artCommitT, &pb.ArtifactCommitCommand{UploadId: "u3", Timestamp: 900})
		if _, chunks, ok := f.Artifact(leftSHA); !ok || !bytes.Equal(bytes.Join(chunks, nil), left) {
			t.Fatal("the upload resumed after a restore did not store its bytes")
		}
	}
	if g.Hash() != h.f.Hash() {
		t.Fatal("hashes differ after the same entries")
	}

	// A corrupt artifact record: one byte of its data flipped (the sha256 no longer matches).
	bad := newHarness(t)
	data, sha := artifactBytes(64, 1)
	bad.upload("u", data, sha)
	bad.ok(artCommitT, &pb.ArtifactCommitCommand{UploadId: "u"})
	s := persist(t, bad.f)
	i := bytes.Index(s, data)
	if i < 0 {
		t.Fatal("artifact bytes not in the stream")
	}
	s[i] ^= 0xff
	before := g.Hash()
	if err := g.Restore(io.NopCloser(bytes.NewReader(s))); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("restore of a corrupt artifact: %v", err)
	}
	if g.Hash() != before {
		t.Fatal("a refused restore changed the state")
	}
}
