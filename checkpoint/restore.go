package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// RestoreError is a restore that could not use the state a completed checkpoint recorded for a
// subtask: the checkpoint, the subtask, the attempt that acknowledged the state and the
// *StateError of the read (which names the file and the cause). A TaskManager fails the task
// with it; its message is the task's failure cause, which the leader reads back with
// ParseRestoreFailure to restore the region from an older checkpoint (docs/checkpoints.md,
// "A damaged checkpoint").
type RestoreError struct {
	Checkpoint uint64
	Vertex     string
	Subtask    int32
	Attempt    int32 // the attempt whose acknowledgement named the state
	Err        *StateError
}

// restoreMarker starts a RestoreError's message; ParseRestoreFailure finds it in a failure
// cause, whatever wraps it.
const restoreMarker = "unusable checkpoint "

func (e *RestoreError) Error() string {
	return fmt.Sprintf("%s%d: state file %s of %s[%d] (acknowledged by attempt %d): %s",
		restoreMarker, e.Checkpoint, strconv.Quote(e.Err.Path), e.Vertex, e.Subtask, e.Attempt, e.Err.cause())
}

func (e *RestoreError) Unwrap() error { return e.Err }

// cause is the error without the path (the RestoreError's message names it once).
func (e *StateError) cause() string {
	msg := e.Err.Error()
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// AsRestoreError wraps err in a RestoreError when it is a *StateError (a state that is
// missing, truncated, corrupt, of another checksum, ...); any other error (no storage, an I/O
// error of the TaskManager's own) is returned as it is: it says nothing of the checkpoint.
func AsRestoreError(err error, id uint64, vertex string, subtask, attempt int32) error {
	var se *StateError
	if !errors.As(err, &se) {
		return err
	}
	return &RestoreError{Checkpoint: id, Vertex: vertex, Subtask: subtask, Attempt: attempt, Err: se}
}

// RestoreFailure is what ParseRestoreFailure finds in a failure cause.
type RestoreFailure struct {
	Checkpoint uint64
	Path       string // relative to the storage root
	Reason     string // why the state was refused (missing, truncated, checksum mismatch, ...)
	Cause      string // the whole failure cause, as the task reported it
}

var restoreRE = regexp.MustCompile(regexp.QuoteMeta(restoreMarker) + `([0-9]{1,20}): state file ("(?:[^"\\]|\\.)*")(?: of [^ ]+ \(acknowledged by attempt -?[0-9]+\): ([^:]*))?`)

// ParseRestoreFailure finds a RestoreError's message in a task's failure cause (the cause of a
// region's other members quotes it too): the checkpoint and the file it could not use.
func ParseRestoreFailure(cause string) (RestoreFailure, bool) {
	if !strings.Contains(cause, restoreMarker) {
		return RestoreFailure{}, false
	}
	m := restoreRE.FindStringSubmatch(cause)
	if m == nil {
		return RestoreFailure{}, false
	}
	id, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil || id == 0 {
		return RestoreFailure{}, false
	}
	p, err := strconv.Unquote(m[2])
	if err != nil {
		return RestoreFailure{}, false
	}
	return RestoreFailure{Checkpoint: id, Path: p, Reason: m[3], Cause: cause}, true
}

// NewerState returns the newest state of vertex[subtask] that reads whole (its header's
// CRC-32C holds) in a checkpoint directory of the job later than id, with that checkpoint's
// id; nil when there is none. A sink restored from id after its region fell back past a
// damaged checkpoint learns from it what its output may have committed since (the directory
// of the completed checkpoint the fallback skipped, or of one that was pending then).
func (s *Store) NewerState(job string, id uint64, vertex string, subtask int32) ([]byte, uint64, error) {
	ids, err := s.Checkpoints(job)
	if err != nil {
		return nil, 0, err
	}
	prefix := fmt.Sprintf("%s-%d-", vertex, subtask)
	for i := len(ids) - 1; i >= 0 && ids[i] > id; i-- {
		dir, err := CheckpointDir(job, ids[i])
		if err != nil {
			return nil, 0, err
		}
		entries, err := fs.ReadDir(s.root.FS(), dir)
		if err != nil {
			continue // deleted meanwhile
		}
		var names []string
		for _, e := range entries {
			if n := e.Name(); strings.HasPrefix(n, prefix) && strings.HasSuffix(n, stateSuffix) {
				names = append(names, n)
			}
		}
		sort.Slice(names, func(a, b int) bool { return attemptOf(names[a], prefix) > attemptOf(names[b], prefix) })
		for _, n := range names {
			if b, err := s.Read(path.Join(dir, n)); err == nil {
				return b, ids[i], nil
			}
		}
	}
	return nil, 0, nil
}

// attemptOf is the attempt number in a state file's name (-1 when it names none).
func attemptOf(name, prefix string) int64 {
	n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(name, prefix), stateSuffix), 10, 32)
	if err != nil {
		return -1
	}
	return n
}
