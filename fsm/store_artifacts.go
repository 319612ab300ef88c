package fsm

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Artifacts (docs/fsm.md, "Artifacts"): content-addressed byte strings, uploaded in chunks
// through Raft, each entry at most ArtifactChunkSize of data. An upload is begun with its
// sha256, size and the limits it must fit (ARTIFACT_BEGIN), fed chunk by chunk in order
// (ARTIFACT_CHUNK) and becomes a stored artifact only when its commit (ARTIFACT_COMMIT) finds
// the declared size and sha256; until then no read sees it. An upload that is never committed
// (its uploader failed, the leader changed) is dropped by ARTIFACT_ABORT, which the leader's
// retention loop proposes for every upload no handler of its own is feeding.

const (
	// ArtifactChunkSize bounds the data of one ARTIFACT_CHUNK (and so of one Raft entry, and of
	// one PutArtifact or GetArtifact message): far below the 4 MiB message limit.
	ArtifactChunkSize = 512 << 10

	// DefaultArtifactMaxBytes, DefaultArtifactMaxTotalBytes and DefaultArtifactMaxCount are the
	// limits a JobMaster applies to new uploads unless configured otherwise
	// (jobmaster.Config.Artifacts).
	DefaultArtifactMaxBytes      = 16 << 20
	DefaultArtifactMaxTotalBytes = 256 << 20
	DefaultArtifactMaxCount      = 100

	// ArtifactCeilingBytes, ArtifactCeilingTotalBytes and ArtifactCeilingCount are the
	// replicated ceilings: every replica refuses an ARTIFACT_BEGIN whose limits are above them,
	// whatever its proposer was configured with. One artifact is one snapshot record, far
	// below the record limit.
	ArtifactCeilingBytes      = 64 << 20
	ArtifactCeilingTotalBytes = 1 << 30
	ArtifactCeilingCount      = 1000

	// maxArtifactUploadID bounds an upload id.
	maxArtifactUploadID = 128
)

// LevelArtifacts is the level that added the ARTIFACT_* commands.
const LevelArtifacts = 3

// ArtifactInfo is a stored artifact without its bytes.
type ArtifactInfo struct {
	SHA256      string
	Size        int64
	StoredAt    int64 // unix milliseconds, the committing leader's clock
	StoredIndex uint64
}

// ValidSHA256 reports whether s is 64 lower-case hex characters.
func ValidSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// CheckArtifactLimits checks the limits a JobMaster is configured with against the replicated
// ceilings; the error names the field, its value and the ceiling's constant.
func CheckArtifactLimits(l *pb.ArtifactLimits) error {
	var bad []string
	if b := l.GetMaxBytes(); b <= 0 || b > ArtifactCeilingBytes {
		bad = append(bad, fmt.Sprintf("max_bytes %d must be in [1, %d] (ArtifactCeilingBytes)", b, ArtifactCeilingBytes))
	}
	if b := l.GetMaxTotalBytes(); b <= 0 || b > ArtifactCeilingTotalBytes {
		bad = append(bad, fmt.Sprintf("max_total_bytes %d must be in [1, %d] (ArtifactCeilingTotalBytes)", b, ArtifactCeilingTotalBytes))
	}
	if n := l.GetMaxArtifacts(); n <= 0 || n > ArtifactCeilingCount {
		bad = append(bad, fmt.Sprintf("max_artifacts %d must be in [1, %d] (ArtifactCeilingCount)", n, ArtifactCeilingCount))
	}
	if len(bad) > 0 {
		return wrapf(ErrInvalidCommand, "artifact limits: %s", strings.Join(bad, "; "))
	}
	return nil
}

// artifactUsage is what the stored artifacts and the uploads in progress hold together.
func (s *state) artifactUsage() (bytes int64, count int) {
	for _, a := range s.artifacts {
		bytes += a.Size
	}
	for _, u := range s.uploads {
		bytes += u.Size
	}
	return bytes, len(s.artifacts) + len(s.uploads)
}

func (s *state) artifactBegin(index uint64, c *pb.ArtifactBeginCommand) (*pb.ArtifactBeginResult, error) {
	switch {
	case c.UploadId == "" || len(c.UploadId) > maxArtifactUploadID:
		return nil, wrapf(ErrInvalidCommand, "upload id %q: must be 1 to %d bytes", c.UploadId, maxArtifactUploadID)
	case !ValidSHA256(c.Sha256):
		return nil, wrapf(ErrInvalidCommand, "sha256 %q: must be 64 lower-case hex characters", c.Sha256)
	case c.Size <= 0:
		return nil, wrapf(ErrInvalidCommand, "artifact %s: size %d must be positive", c.Sha256, c.Size)
	case s.uploads[c.UploadId] != nil:
		return nil, wrapf(ErrInvalidCommand, "upload id %q is in progress already", c.UploadId)
	}
	if err := CheckArtifactLimits(c.Limits); err != nil {
		return nil, err
	}
	if a := s.artifacts[c.Sha256]; a != nil {
		if a.Size != c.Size {
			return nil, wrapf(ErrArtifactMismatch, "artifact %s is stored with %d bytes, not %d", c.Sha256, a.Size, c.Size)
		}
		return &pb.ArtifactBeginResult{Exists: true}, nil
	}
	l := c.Limits
	if c.Size > l.MaxBytes {
		return nil, wrapf(ErrArtifactLimit, "artifact %s: %d bytes is over the limit of %d bytes per artifact (max_bytes)", c.Sha256, c.Size, l.MaxBytes)
	}
	total, count := s.artifactUsage()
	if total+c.Size > l.MaxTotalBytes {
		return nil, wrapf(ErrArtifactLimit, "artifact %s: %d bytes with the %d stored or being uploaded is over the limit of %d bytes in all (max_total_bytes)", c.Sha256, c.Size, total, l.MaxTotalBytes)
	}
	if count+1 > int(l.MaxArtifacts) {
		return nil, wrapf(ErrArtifactLimit, "artifact %s: %d artifacts are stored or being uploaded, the limit is %d (max_artifacts)", c.Sha256, count, l.MaxArtifacts)
	}
	s.uploads[c.UploadId] = &pb.ArtifactUpload{UploadId: c.UploadId, Sha256: c.Sha256, Size: c.Size, BegunAt: c.Timestamp, BeginIndex: index}
	return &pb.ArtifactBeginResult{}, nil
}

func (s *state) artifactChunk(c *pb.ArtifactChunkCommand) error {
	u := s.uploads[c.UploadId]
	switch {
	case u == nil:
		return wrapf(ErrUnknownUpload, "upload %q", c.UploadId)
	case int(c.Index) != len(u.Chunks):
		return wrapf(ErrInvalidCommand, "upload %q: chunk %d, want chunk %d", c.UploadId, c.Index, len(u.Chunks))
	case len(c.Data) == 0 || len(c.Data) > ArtifactChunkSize:
		return wrapf(ErrInvalidCommand, "upload %q chunk %d: %d bytes, must be 1 to %d (ArtifactChunkSize)", c.UploadId, c.Index, len(c.Data), ArtifactChunkSize)
	case u.Received+int64(len(c.Data)) > u.Size:
		return wrapf(ErrArtifactMismatch, "upload %q of artifact %s: %d bytes received, over the declared size of %d", c.UploadId, u.Sha256, u.Received+int64(len(c.Data)), u.Size)
	}
	u.Chunks = append(u.Chunks, c.Data)
	u.Received += int64(len(c.Data))
	return nil
}

func (s *state) artifactCommit(index uint64, c *pb.ArtifactCommitCommand) error {
	u := s.uploads[c.UploadId]
	if u == nil {
		return wrapf(ErrUnknownUpload, "upload %q", c.UploadId)
	}
	if u.Received != u.Size {
		return wrapf(ErrArtifactMismatch, "upload %q of artifact %s: %d bytes received, %d declared", c.UploadId, u.Sha256, u.Received, u.Size)
	}
	h := sha256.New()
	for _, b := range u.Chunks {
		h.Write(b)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != u.Sha256 {
		return wrapf(ErrArtifactMismatch, "upload %q: the bytes have sha256 %s, not the declared %s", c.UploadId, got, u.Sha256)
	}
	delete(s.uploads, c.UploadId)
	if s.artifacts[u.Sha256] == nil { // another upload of the same bytes may have won
		s.artifacts[u.Sha256] = &pb.ArtifactRecord{Sha256: u.Sha256, Size: u.Size, StoredAt: c.Timestamp, StoredIndex: index, Chunks: u.Chunks}
	}
	return nil
}

func (s *state) artifactAbort(c *pb.ArtifactAbortCommand) error {
	if len(c.UploadIds) == 0 {
		return wrapf(ErrInvalidCommand, "no upload ids")
	}
	seen := map[string]bool{}
	for _, id := range c.UploadIds {
		if seen[id] {
			return wrapf(ErrInvalidCommand, "upload %q named twice", id)
		}
		seen[id] = true
		if s.uploads[id] == nil {
			return wrapf(ErrUnknownUpload, "upload %q", id)
		}
	}
	for _, id := range c.UploadIds {
		delete(s.uploads, id)
	}
	return nil
}

func (s *state) artifactRemove(c *pb.ArtifactRemoveCommand) error {
	if len(c.Sha256) == 0 {
		return wrapf(ErrInvalidCommand, "no artifacts")
	}
	seen := map[string]bool{}
	for _, h := range c.Sha256 {
		if seen[h] {
			return wrapf(ErrInvalidCommand, "artifact %s named twice", h)
		}
		seen[h] = true
		if s.artifacts[h] == nil {
			return wrapf(ErrUnknownArtifact, "artifact %s", h)
		}
	}
	users := s.artifactUsers(seen, true)
	for _, h := range c.Sha256 {
		if jobs := users[h]; len(jobs) > 0 {
			return wrapf(ErrArtifactInUse, "artifact %s is used by job(s) %s, not terminal", h, strings.Join(jobs, ", "))
		}
	}
	for _, h := range c.Sha256 {
		delete(s.artifacts, h)
	}
	return nil
}

// artifactUsers maps each artifact of want (every one when want is nil) to the jobs whose
// wasm vertices name it, in the order of sortedJobs; activeOnly leaves terminal jobs out.
func (s *state) artifactUsers(want map[string]bool, activeOnly bool) map[string][]string {
	out := map[string][]string{}
	for _, rec := range s.sortedJobs() {
		if activeOnly && graph.IsGloballyTerminal(rec.Status) {
			continue
		}
		for _, h := range JobArtifacts(rec.JobGraph) {
			if want == nil || want[h] {
				out[h] = append(out[h], jobID(rec))
			}
		}
	}
	return out
}

// JobArtifacts lists the artifacts a job graph's wasm vertices name, each once, sorted.
func JobArtifacts(jg *pb.JobGraph) []string {
	var out []string
	for _, v := range jg.GetVertices() {
		if h := v.GetOperator().GetWasm().GetArtifact(); h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

// sortedArtifacts returns the stored artifacts ordered by sha256.
func (s *state) sortedArtifacts() []*pb.ArtifactRecord {
	out := make([]*pb.ArtifactRecord, 0, len(s.artifacts))
	for _, a := range s.artifacts {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *pb.ArtifactRecord) int { return cmp.Compare(a.Sha256, b.Sha256) })
	return out
}

// sortedUploads returns the uploads in progress ordered by upload id.
func (s *state) sortedUploads() []*pb.ArtifactUpload {
	out := make([]*pb.ArtifactUpload, 0, len(s.uploads))
	for _, u := range s.uploads {
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b *pb.ArtifactUpload) int { return cmp.Compare(a.UploadId, b.UploadId) })
	return out
}

// restoreArtifact adds a restored artifact, checking its bytes against its size and sha256.
func (s *state) restoreArtifact(a *pb.ArtifactRecord) error {
	if a == nil || !ValidSHA256(a.Sha256) {
		return fmt.Errorf("%w: an artifact record without a valid sha256", ErrSnapshotCorrupt)
	}
	if s.artifacts[a.Sha256] != nil {
		return fmt.Errorf("%w: artifact %s appears twice", ErrSnapshotCorrupt, a.Sha256)
	}
	h := sha256.New()
	var n int64
	for _, b := range a.Chunks {
		h.Write(b)
		n += int64(len(b))
	}
	if n != a.Size || hex.EncodeToString(h.Sum(nil)) != a.Sha256 {
		return fmt.Errorf("%w: artifact %s: its %d bytes do not match its size %d or its sha256", ErrSnapshotCorrupt, a.Sha256, n, a.Size)
	}
	s.artifacts[a.Sha256] = a
	return nil
}

// restoreUpload adds a restored upload in progress.
func (s *state) restoreUpload(u *pb.ArtifactUpload) error {
	if u == nil || u.UploadId == "" || s.uploads[u.UploadId] != nil {
		return fmt.Errorf("%w: an upload record without an id, or twice", ErrSnapshotCorrupt)
	}
	var n int64
	for _, b := range u.Chunks {
		n += int64(len(b))
	}
	if n != u.Received || n > u.Size {
		return fmt.Errorf("%w: upload %q: %d bytes, %d received, %d declared", ErrSnapshotCorrupt, u.UploadId, n, u.Received, u.Size)
	}
	s.uploads[u.UploadId] = u
	return nil
}

// Artifact returns a stored artifact and its chunks (shared, never to be modified: a stored
// artifact is immutable), or false when the state does not hold it.
func (f *FSM) Artifact(sha string) (ArtifactInfo, [][]byte, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	a := f.st.artifacts[sha]
	if a == nil {
		return ArtifactInfo{}, nil, false
	}
	return artifactInfo(a), slices.Clone(a.Chunks), true
}

func artifactInfo(a *pb.ArtifactRecord) ArtifactInfo {
	return ArtifactInfo{SHA256: a.Sha256, Size: a.Size, StoredAt: a.StoredAt, StoredIndex: a.StoredIndex}
}

// HasArtifact reports whether the state holds a stored artifact.
func (f *FSM) HasArtifact(sha string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.artifacts[sha] != nil
}

// ArtifactUse is a stored artifact with the jobs whose wasm vertices name it.
type ArtifactUse struct {
	ArtifactInfo
	Jobs       []string // every job in the state, in creation order
	ActiveJobs []string // those that are not terminal
}

// Artifacts lists the stored artifacts by sha256 with the jobs that use them, and the number
// of uploads in progress.
func (f *FSM) Artifacts() ([]ArtifactUse, int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	all, active := f.st.artifactUsers(nil, false), f.st.artifactUsers(nil, true)
	var out []ArtifactUse
	for _, a := range f.st.sortedArtifacts() {
		out = append(out, ArtifactUse{ArtifactInfo: artifactInfo(a), Jobs: all[a.Sha256], ActiveJobs: active[a.Sha256]})
	}
	return out, len(f.st.uploads)
}

// ArtifactUploads lists the ids of the uploads in progress, sorted.
func (f *FSM) ArtifactUploads() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []string
	for _, u := range f.st.sortedUploads() {
		out = append(out, u.UploadId)
	}
	return out
}
