package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// A snapshot file (`jmnode snapshot save`) is the FSM's snapshot stream behind a short header:
// SnapshotFileMagic, then the applied index the state is at (uvarint).
const SnapshotFileMagic = "JMCLUSTER-SNAPSHOT-1\n"

// ErrNotASnapshotFile: the file does not start with SnapshotFileMagic.
var ErrNotASnapshotFile = errors.New("fsm: not a jmcluster snapshot file")

// SnapshotAt is Snapshot with the applied index the copy is at, read under the same lock.
func (f *FSM) SnapshotAt() (raft.FSMSnapshot, uint64, error) {
	f.mu.RLock()
	index := f.st.applied
	f.mu.RUnlock()
	// Snapshot takes the read lock again: an Apply in between would make the copy newer than
	// index, so compare and retry (Applies are short; this settles at once).
	for {
		snap, err := f.Snapshot()
		if err != nil {
			return nil, 0, err
		}
		f.mu.RLock()
		now := f.st.applied
		f.mu.RUnlock()
		if now == index {
			return snap, index, nil
		}
		index = now
	}
}

// WriteSnapshotFileHeader writes a snapshot file's header.
func WriteSnapshotFileHeader(w io.Writer, index uint64) error {
	b := binary.AppendUvarint([]byte(SnapshotFileMagic), index)
	_, err := w.Write(b)
	return err
}

// SnapshotSummary is what `jmnode snapshot inspect` shows of a snapshot file.
type SnapshotSummary struct {
	Index           uint64         `json:"index"`
	Hash            string         `json:"hash"`
	Bytes           int64          `json:"bytes"`
	Epoch           uint64         `json:"epoch"`
	Leader          string         `json:"leader"`
	Jobs            []JobSummary   `json:"jobs"`
	Reconciliations int            `json:"reconciliations"`
	PoolMembers     int            `json:"pool_members"`
	RecordBytes     map[string]int `json:"record_bytes"` // by record type
	Records         map[string]int `json:"records"`
}

// JobSummary is one job of a snapshot.
type JobSummary struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Status     string `json:"status"`
	Executions int    `json:"executions"`
	Running    int    `json:"running"`
	Restarts   int32  `json:"restarts"`
}

// splitSnapshotFile returns the FSM snapshot stream of a snapshot file and the index in its header.
func splitSnapshotFile(data []byte) (stream []byte, index uint64, err error) {
	if !bytes.HasPrefix(data, []byte(SnapshotFileMagic)) {
		return nil, 0, ErrNotASnapshotFile
	}
	rest := data[len(SnapshotFileMagic):]
	index, n := binary.Uvarint(rest)
	if n <= 0 {
		return nil, 0, fmt.Errorf("%w: no index after the magic", ErrSnapshotCorrupt)
	}
	return rest[n:], index, nil
}

// RestoreStream returns the snapshot stream a JobMaster restores from a snapshot file (`jmnode
// snapshot restore`): the file's state, checked by restoring it, with its leader epoch raised to
// at least minEpoch, so the leader that restores it establishes an epoch above every epoch a
// TaskManager has seen (and is not refused as a deposed leader). The leader id and address of
// the epoch record stay those of the saved state.
func RestoreStream(file []byte, minEpoch uint64) ([]byte, error) {
	stream, _, err := splitSnapshotFile(file)
	if err != nil {
		return nil, err
	}
	f := New(hclog.NewNullLogger())
	if err := f.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
		return nil, err
	}
	f.mu.Lock()
	if f.st.epoch.GetEpoch() < minEpoch {
		ep := proto.Clone(f.st.epoch).(*pb.LeaderEpoch)
		ep.Epoch = minEpoch
		f.st.epoch = ep
	}
	f.mu.Unlock()
	snap, err := f.Snapshot()
	if err != nil {
		return nil, err
	}
	defer snap.Release()
	var sink bufferSink
	if err := snap.Persist(&sink); err != nil {
		return nil, err
	}
	return sink.Bytes(), nil
}

// bufferSink is a raft.SnapshotSink into memory.
type bufferSink struct{ bytes.Buffer }

func (*bufferSink) Close() error  { return nil }
func (*bufferSink) Cancel() error { return nil }
func (*bufferSink) ID() string    { return "buffer" }

// InspectSnapshotFile reads a snapshot file: it restores the state (so a file that does not
// restore is refused, as a JobMaster would refuse it), and counts the records and bytes by type.
func InspectSnapshotFile(r io.Reader) (*SnapshotSummary, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	stream, index, err := splitSnapshotFile(data)
	if err != nil {
		return nil, err
	}
	f := New(hclog.NewNullLogger())
	if err := f.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.st.applied = index
	f.mu.Unlock()
	s := &SnapshotSummary{Index: index, Hash: f.Hash(), Bytes: int64(len(data)), RecordBytes: map[string]int{}, Records: map[string]int{}}
	br := bufio.NewReader(bytes.NewReader(stream))
	for {
		size, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
		}
		b := make([]byte, size)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
		}
		rec := &pb.SnapshotRecord{}
		if err := proto.Unmarshal(b, rec); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
		}
		kind := "unknown"
		switch rec.Record.(type) {
		case *pb.SnapshotRecord_Header:
			kind = "header"
		case *pb.SnapshotRecord_Job:
			kind = "job"
		case *pb.SnapshotRecord_Epoch:
			kind = "epoch"
		case *pb.SnapshotRecord_Reconciliation:
			kind = "reconciliation"
		case *pb.SnapshotRecord_Pool:
			kind = "pool"
		case *pb.SnapshotRecord_Artifact:
			kind = "artifact"
		case *pb.SnapshotRecord_ArtifactUpload:
			kind = "artifact_upload"
		}
		s.Records[kind]++
		s.RecordBytes[kind] += int(size)
	}
	ep := f.Epoch()
	s.Epoch, s.Leader = ep.GetEpoch(), ep.GetLeaderId()
	s.Reconciliations = len(f.Reconciliations())
	s.PoolMembers = len(f.Pool().GetMembers())
	for _, rec := range f.Jobs() {
		j := JobSummary{ID: rec.GetJobGraph().GetJobId(), Name: rec.GetJobGraph().GetName(), Status: rec.GetStatus().String(), Restarts: rec.GetRestarts()}
		for _, v := range rec.GetExecutionGraph().GetVertices() {
			for _, ev := range v.GetSubtasks() {
				j.Executions++
				if ev.GetCurrent().GetState() == pb.ExecutionState_EXECUTION_STATE_RUNNING {
					j.Running++
				}
			}
		}
		s.Jobs = append(s.Jobs, j)
	}
	sort.Slice(s.Jobs, func(a, b int) bool { return s.Jobs[a].ID < s.Jobs[b].ID })
	return s, nil
}

// SnapshotPoolAddresses returns the gRPC addresses of the TaskManagers in a snapshot file's pool:
// a restore asks them which epoch they have seen before it raises the state's epoch.
func SnapshotPoolAddresses(file []byte) ([]string, error) {
	stream, _, err := splitSnapshotFile(file)
	if err != nil {
		return nil, err
	}
	f := New(hclog.NewNullLogger())
	if err := f.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
		return nil, err
	}
	var out []string
	for _, m := range f.Pool().GetMembers() {
		if m.GetGrpcAddress() != "" {
			out = append(out, m.GetGrpcAddress())
		}
	}
	return out, nil
}
