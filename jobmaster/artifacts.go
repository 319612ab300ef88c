package jobmaster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/internal/setting"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Artifacts (docs/user-functions.md, "Artifacts"; the commands: docs/fsm.md): the leader
// commits an upload chunk by chunk, refuses a job naming an artifact the state does not hold,
// and removes artifacts and abandoned uploads in its retention loop.

var (
	// ErrArtifactLevel: a Raft server does not gossip that it applies the artifact commands
	// (FAILED_PRECONDITION).
	ErrArtifactLevel = fmt.Errorf("jobmaster: a Raft server does not gossip that it applies the artifact commands (FSM level %d): upgrade every JobMaster first", fsm.LevelArtifacts)
	// ErrUnknownArtifact: a job names an artifact the state does not hold (FAILED_PRECONDITION).
	ErrUnknownArtifact = errors.New("jobmaster: unknown artifact")
)

// ArtifactLimits returns the limits this JobMaster applies to new uploads.
func (jm *JobMaster) ArtifactLimits() *pb.ArtifactLimits {
	c := jm.cfg
	return &pb.ArtifactLimits{MaxBytes: c.ArtifactMaxBytes, MaxTotalBytes: c.ArtifactMaxTotalBytes, MaxArtifacts: int32(c.ArtifactMaxCount)}
}

// validateArtifactLimits refuses a negative limit or one above its replicated ceiling.
func (c Config) validateArtifactLimits() error {
	for _, l := range []struct {
		field       string
		v, ceiling  int64
		ceilingName string
	}{
		{"ArtifactMaxBytes", c.ArtifactMaxBytes, fsm.ArtifactCeilingBytes, "fsm.ArtifactCeilingBytes"},
		{"ArtifactMaxTotalBytes", c.ArtifactMaxTotalBytes, fsm.ArtifactCeilingTotalBytes, "fsm.ArtifactCeilingTotalBytes"},
		{"ArtifactMaxCount", int64(c.ArtifactMaxCount), fsm.ArtifactCeilingCount, "fsm.ArtifactCeilingCount"},
	} {
		if l.v < 0 || l.v > l.ceiling {
			return setting.New(ErrInvalidConfig, l.field, l.v, "must be in [0, %d] (%s; 0 means the default)", l.ceiling, l.ceilingName)
		}
	}
	return nil
}

func (jm *JobMaster) serversApplyArtifacts() bool {
	f := jm.cfg.ServersApply
	return f == nil || f(fsm.LevelArtifacts)
}

// PutArtifact stores an artifact on the established leader: it commits the upload's begin
// (checked against the limits before any byte is sent), each chunk next returns (io.EOF after
// the last) and the commit, which checks the size and sha256. On any failure the upload is
// aborted (the retention aborts it if that fails too), so nothing half-uploaded is visible.
func (jm *JobMaster) PutArtifact(ctx context.Context, sha string, size int64, next func() ([]byte, error)) (*pb.PutArtifactResponse, error) {
	if _, err := jm.openTerm(); err != nil {
		return nil, err
	}
	switch {
	case !fsm.ValidSHA256(sha):
		return nil, errorf(ErrInvalidRequest, "sha256 %q: must be 64 lower-case hex characters", sha)
	case size <= 0:
		return nil, errorf(ErrInvalidRequest, "artifact %s: size %d must be positive", sha, size)
	case !jm.serversApplyArtifacts():
		return nil, ErrArtifactLevel
	}
	id := newUploadID(jm.NodeID())
	jm.uploadsMu.Lock()
	jm.uploads[id] = true // before its begin is committed: the retention spares it
	jm.uploadsMu.Unlock()
	defer func() {
		jm.uploadsMu.Lock()
		delete(jm.uploads, id)
		jm.uploadsMu.Unlock()
	}()
	res, err := jm.Commit(ctx, pb.CommandType_COMMAND_TYPE_ARTIFACT_BEGIN, &pb.ArtifactBeginCommand{
		UploadId: id, Sha256: sha, Size: size, Limits: jm.ArtifactLimits(), Timestamp: nowMillis()})
	if err != nil {
		return nil, err
	}
	if v, _ := res.Value.(*pb.ArtifactBeginResult); v.GetExists() {
		info, _, _ := jm.state.Artifact(sha)
		return &pb.PutArtifactResponse{Sha256: sha, Size: size, Existed: true, Index: info.StoredIndex, StoredAt: info.StoredAt}, nil
	}
	out, err := jm.feedUpload(ctx, id, sha, size, next)
	if err != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jm.cfg.RPCTimeout)
		defer cancel()
		if _, aerr := jm.Commit(actx, pb.CommandType_COMMAND_TYPE_ARTIFACT_ABORT, &pb.ArtifactAbortCommand{UploadIds: []string{id}}); aerr != nil {
			jm.log.Warn("artifact upload not aborted (the retention will)", "upload", id, "error", aerr)
		}
		return nil, err
	}
	jm.log.Info("artifact stored", "sha256", sha, "size", size, "index", out.Index)
	return out, nil
}

// feedUpload commits the chunks and the commit of an upload begun.
func (jm *JobMaster) feedUpload(ctx context.Context, id, sha string, size int64, next func() ([]byte, error)) (*pb.PutArtifactResponse, error) {
	var received int64
	for i := int32(0); ; i++ {
		data, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		received += int64(len(data))
		switch {
		case len(data) == 0 || len(data) > fsm.ArtifactChunkSize:
			return nil, errorf(ErrInvalidRequest, "artifact %s: message %d has %d bytes, must be 1 to %d (fsm.ArtifactChunkSize)", sha, i+1, len(data), fsm.ArtifactChunkSize)
		case received > size:
			return nil, errorf(ErrInvalidRequest, "artifact %s: %d bytes sent, more than the declared size %d", sha, received, size)
		}
		if _, err := jm.Commit(ctx, pb.CommandType_COMMAND_TYPE_ARTIFACT_CHUNK, &pb.ArtifactChunkCommand{UploadId: id, Index: i, Data: data}); err != nil {
			return nil, err
		}
	}
	if received != size {
		return nil, errorf(ErrInvalidRequest, "artifact %s: %d bytes sent, the declared size is %d", sha, received, size)
	}
	ts := nowMillis()
	res, err := jm.Commit(ctx, pb.CommandType_COMMAND_TYPE_ARTIFACT_COMMIT, &pb.ArtifactCommitCommand{UploadId: id, Timestamp: ts})
	if err != nil {
		if errors.Is(err, fsm.ErrArtifactMismatch) {
			return nil, errorf(ErrInvalidRequest, "%v", err)
		}
		return nil, err
	}
	info, _, _ := jm.state.Artifact(sha)
	return &pb.PutArtifactResponse{Sha256: sha, Size: size, Index: res.Index, StoredAt: info.StoredAt}, nil
}

func newUploadID(node string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return node + "-" + hex.EncodeToString(b[:])
}

// RemoveArtifact commits the removal of a stored artifact on the established leader; the FSM
// refuses it while a job that is not terminal uses it (naming the jobs).
func (jm *JobMaster) RemoveArtifact(ctx context.Context, sha string) (uint64, error) {
	if _, err := jm.openTerm(); err != nil {
		return 0, err
	}
	if !fsm.ValidSHA256(sha) {
		return 0, errorf(ErrInvalidRequest, "sha256 %q: must be 64 lower-case hex characters", sha)
	}
	if !jm.serversApplyArtifacts() {
		return 0, ErrArtifactLevel
	}
	jm.artifactMu.Lock()
	defer jm.artifactMu.Unlock()
	res, err := jm.Commit(ctx, pb.CommandType_COMMAND_TYPE_ARTIFACT_REMOVE, &pb.ArtifactRemoveCommand{Sha256: []string{sha}})
	if err != nil {
		return 0, err
	}
	jm.log.Info("artifact removed", "sha256", sha, "index", res.Index)
	return res.Index, nil
}

// checkArtifacts refuses a job whose wasm vertices name an artifact the state does not hold,
// naming the vertex and the hash. The caller holds artifactMu until the job is committed, so
// that no removal of this leader slips in between.
func (jm *JobMaster) checkArtifacts(jg *pb.JobGraph) error {
	var missing []string
	for _, v := range jg.GetVertices() {
		if h := v.GetOperator().GetWasm().GetArtifact(); h != "" && !jm.state.HasArtifact(h) {
			missing = append(missing, fmt.Sprintf("vertex %q: wasm.artifact %s", v.GetId(), h))
		}
	}
	if len(missing) > 0 {
		return errorf(ErrUnknownArtifact, "job %q names artifacts the cluster does not hold (upload them with `jmnode artifact put`): %s", jg.GetJobId(), strings.Join(missing, "; "))
	}
	return nil
}

// retainArtifacts is the artifact part of the retention round: it aborts every upload in
// progress that no handler of this leader feeds (left by a failed handler or an earlier
// leader), and removes every artifact no job in the state names that was stored more than
// RetainJobAge ago (a job's artifacts stay while the job does, so at least as long as the
// terminal-job retention after it ended).
func (t *term) retainArtifacts() {
	jm := t.jm
	if !jm.serversApplyArtifacts() {
		return
	}
	ctx, cancel := context.WithTimeout(t.ctx, jm.cfg.RPCTimeout)
	defer cancel()
	var orphans []string
	jm.uploadsMu.Lock()
	for _, id := range jm.state.ArtifactUploads() {
		if !jm.uploads[id] {
			orphans = append(orphans, id)
		}
	}
	jm.uploadsMu.Unlock()
	if len(orphans) > 0 {
		if _, err := jm.Commit(ctx, pb.CommandType_COMMAND_TYPE_ARTIFACT_ABORT, &pb.ArtifactAbortCommand{UploadIds: orphans}); err != nil {
			jm.log.Warn("abandoned artifact uploads not aborted", "uploads", len(orphans), "error", err)
		} else {
			jm.log.Info("aborted abandoned artifact uploads", "uploads", orphans)
		}
	}
	jm.artifactMu.Lock()
	defer jm.artifactMu.Unlock()
	list, _ := jm.state.Artifacts()
	cutoff := time.Now().Add(-jm.cfg.RetainJobAge).UnixMilli()
	var expired []string
	for _, a := range list {
		if len(a.Jobs) == 0 && a.StoredAt < cutoff {
			expired = append(expired, a.SHA256)
		}
	}
	if len(expired) == 0 {
		return
	}
	if _, err := jm.Commit(ctx, pb.CommandType_COMMAND_TYPE_ARTIFACT_REMOVE, &pb.ArtifactRemoveCommand{Sha256: expired}); err != nil {
		jm.log.Warn("unused artifacts not removed", "artifacts", len(expired), "error", err)
		return
	}
	jm.log.Info("removed unused artifacts past the retention", "artifacts", expired, "retain_job_age", jm.cfg.RetainJobAge)
}
