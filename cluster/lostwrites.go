package cluster

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// A disk that lies about fsync (the failpoint disk-lose-unsynced): while it is on, Raft log and
// stable-store writes are acknowledged at once and kept in memory; a timer writes them to
// raft.db 1-2 s later. Reads see them meanwhile, so the replica behaves as if they were on
// disk, and a kill -9 loses them. With the failpoint off every call goes straight to the store
// (after the writes still held, in order).

const (
	lossyFlushMin = time.Second
	lossyFlushMax = 2 * time.Second
)

// lossyStore is the log and stable store of raft.db behind the lying disk.
type lossyStore struct {
	logs   raft.LogStore
	stable raft.StableStore
	logger hclog.Logger

	mu      sync.Mutex
	entries map[uint64]*raft.Log // held log entries
	values  map[string][]byte    // held stable values
	timer   *time.Timer          // the pending flush, nil when nothing is held
}

func newLossyStore(logs raft.LogStore, stable raft.StableStore, logger hclog.Logger) *lossyStore {
	return &lossyStore{logs: logs, stable: stable, logger: logger, entries: map[uint64]*raft.Log{}, values: map[string][]byte{}}
}

// holding reports whether writes are to be held (the failpoint is on); with it off, whatever
// is held is written first. s.mu is held.
func (s *lossyStore) holding() bool {
	if failpoint.Enabled(failpoint.DiskLoseUnsynced) {
		if s.timer == nil {
			d := lossyFlushMin + rand.N(lossyFlushMax-lossyFlushMin)
			s.timer = time.AfterFunc(d, s.flush)
		}
		return true
	}
	if err := s.flushLocked(); err != nil {
		s.logger.Warn("writing held raft.db writes", "error", err)
	}
	return false
}

func (s *lossyStore) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer = nil
	if err := s.flushLocked(); err != nil {
		s.logger.Warn("writing held raft.db writes", "error", err)
	}
}

func (s *lossyStore) flushLocked() error {
	if len(s.entries) == 0 && len(s.values) == 0 {
		return nil
	}
	var errs []error
	if len(s.entries) > 0 {
		ls := make([]*raft.Log, 0, len(s.entries))
		for _, l := range s.entries {
			ls = append(ls, l)
		}
		sort.Slice(ls, func(i, j int) bool { return ls[i].Index < ls[j].Index })
		errs = append(errs, s.logs.StoreLogs(ls))
		s.logger.Info("disk-lose-unsynced: held writes written", "entries", len(ls), "first", ls[0].Index, "last", ls[len(ls)-1].Index, "stable_values", len(s.values))
	}
	keys := make([]string, 0, len(s.values))
	for k := range s.values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		errs = append(errs, s.stable.Set([]byte(k), s.values[k]))
	}
	s.entries, s.values = map[uint64]*raft.Log{}, map[string][]byte{}
	return errors.Join(errs...)
}

// lossyLogs is the log-store face of a lossyStore.
type lossyLogs struct{ s *lossyStore }

func (l lossyLogs) FirstIndex() (uint64, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	first, err := l.s.logs.FirstIndex()
	if err != nil {
		return 0, err
	}
	for i := range l.s.entries {
		if first == 0 || i < first {
			first = i
		}
	}
	return first, nil
}

func (l lossyLogs) LastIndex() (uint64, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	last, err := l.s.logs.LastIndex()
	if err != nil {
		return 0, err
	}
	for i := range l.s.entries {
		last = max(last, i)
	}
	return last, nil
}

func (l lossyLogs) GetLog(index uint64, out *raft.Log) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if e, ok := l.s.entries[index]; ok {
		// A copy: a caller that reuses out decodes its next entry into out.Data's array, which
		// would otherwise be the held entry's while the flush encodes it.
		*out = *e
		out.Data = bytes.Clone(e.Data)
		out.Extensions = bytes.Clone(e.Extensions)
		return nil
	}
	return l.s.logs.GetLog(index, out)
}

func (l lossyLogs) StoreLog(e *raft.Log) error { return l.StoreLogs([]*raft.Log{e}) }

func (l lossyLogs) StoreLogs(ls []*raft.Log) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if !l.s.holding() {
		return l.s.logs.StoreLogs(ls)
	}
	if len(l.s.entries) == 0 && len(ls) > 0 {
		l.s.logger.Info("disk-lose-unsynced: holding writes", "from_index", ls[0].Index)
	}
	for _, e := range ls {
		c := *e
		l.s.entries[e.Index] = &c
	}
	return nil
}

// DeleteRange writes what is held first, so the deletion applies to it in order.
func (l lossyLogs) DeleteRange(lo, hi uint64) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if err := l.s.flushLocked(); err != nil {
		return err
	}
	return l.s.logs.DeleteRange(lo, hi)
}

// lossyStable is the stable-store face of a lossyStore.
type lossyStable struct{ s *lossyStore }

func (st lossyStable) Set(k, v []byte) error {
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	if !st.s.holding() {
		return st.s.stable.Set(k, v)
	}
	st.s.values[string(k)] = append([]byte(nil), v...)
	return nil
}

func (st lossyStable) Get(k []byte) ([]byte, error) {
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	if v, ok := st.s.values[string(k)]; ok {
		return append([]byte(nil), v...), nil
	}
	return st.s.stable.Get(k)
}

func (st lossyStable) SetUint64(k []byte, v uint64) error {
	return errors.New("cluster: lossy stable store: SetUint64 must pass the checksum layer")
}

func (st lossyStable) GetUint64(k []byte) (uint64, error) {
	return 0, errors.New("cluster: lossy stable store: GetUint64 must pass the checksum layer")
}
