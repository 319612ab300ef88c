package cluster

import (
	"context"
	"errors"
	"io"

	"github.com/hashicorp/raft"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// The disk faults a replica can be given, through the failpoints disk-write (a delay),
// disk-fail-before-write, disk-fail-after-write and disk-panic-mid-write. Every write of the
// Raft log, the stable store (term, vote) and a snapshot passes through one of the wrappers
// below, set up by NewNode; with no failpoint set a write costs one atomic load more.

// ErrDiskFault is the error of a write failed by a disk failpoint.
var ErrDiskFault = errors.New("disk fault (failpoint)")

// beforeWrite delays the write (disk-write) and fails it before it is made
// (disk-fail-before-write).
func beforeWrite(what string) error {
	failpoint.Inject(context.Background(), failpoint.DiskWrite)
	if failpoint.Enabled(failpoint.DiskFailBeforeWrite) {
		return errors.Join(ErrDiskFault, errors.New(what+": failed before writing"))
	}
	return nil
}

// afterWrite fails a write that was made (disk-fail-after-write): the data is on disk, the
// caller is told it is not.
func afterWrite(what string, err error) error {
	if err == nil && failpoint.Enabled(failpoint.DiskFailAfterWrite) {
		return errors.Join(ErrDiskFault, errors.New(what+": failed after writing"))
	}
	return err
}

// faultyLogStore is the Raft log store with the disk failpoints on its writes; every write's
// outcome goes to the replica's disk health (diskhealth.go).
type faultyLogStore struct {
	raft.LogStore
	health *diskHealth
}

func (s faultyLogStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s faultyLogStore) StoreLogs(ls []*raft.Log) error {
	if err := beforeWrite("store logs"); err != nil {
		return s.health.note("store logs", err)
	}
	if failpoint.Enabled(failpoint.DiskPanicMidWrite) && len(ls) > 0 {
		// A crash in the middle of a write: the first half is on disk, the rest is not, and
		// nobody is told anything.
		_ = s.LogStore.StoreLogs(ls[:len(ls)/2])
		panic("failpoint disk-panic-mid-write: crashed while storing Raft log entries")
	}
	return s.health.note("store logs", afterWrite("store logs", s.LogStore.StoreLogs(ls)))
}

func (s faultyLogStore) DeleteRange(min, max uint64) error {
	if err := beforeWrite("delete logs"); err != nil {
		return err
	}
	return afterWrite("delete logs", s.LogStore.DeleteRange(min, max))
}

// faultyStableStore is the stable store (current term, vote) with the disk failpoints.
type faultyStableStore struct {
	raft.StableStore
	health *diskHealth
}

func (s faultyStableStore) Set(k, v []byte) error {
	if err := beforeWrite("stable set"); err != nil {
		return s.health.note("stable set", err)
	}
	return s.health.note("stable set", afterWrite("stable set", s.StableStore.Set(k, v)))
}

func (s faultyStableStore) SetUint64(k []byte, v uint64) error {
	if err := beforeWrite("stable set"); err != nil {
		return s.health.note("stable set", err)
	}
	return s.health.note("stable set", afterWrite("stable set", s.StableStore.SetUint64(k, v)))
}

// faultySnapshotStore creates snapshot sinks whose writes pass the disk failpoints.
type faultySnapshotStore struct{ raft.SnapshotStore }

func (s faultySnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, c raft.Configuration, ci uint64, t raft.Transport) (raft.SnapshotSink, error) {
	if err := beforeWrite("create snapshot"); err != nil {
		return nil, err
	}
	sink, err := s.SnapshotStore.Create(version, index, term, c, ci, t)
	if err != nil {
		return nil, err
	}
	return faultySink{sink}, nil
}

type faultySink struct{ raft.SnapshotSink }

func (s faultySink) Write(p []byte) (int, error) {
	if err := beforeWrite("write snapshot"); err != nil {
		return 0, err
	}
	n, err := s.SnapshotSink.Write(p)
	return n, afterWrite("write snapshot", err)
}

func (s faultySink) Close() error {
	if err := beforeWrite("close snapshot"); err != nil {
		_ = s.SnapshotSink.Cancel()
		return err
	}
	return afterWrite("close snapshot", s.SnapshotSink.Close())
}

var _ io.WriteCloser = faultySink{}
