package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// Every Raft log entry and every stable-store value this replica writes carries a checksum, so
// a damaged raft.db is found instead of served (bbolt has no page checksums and raft-boltdb
// stores entries as they come). A log entry's checksum travels in raft.Log.Extensions (the
// field hashicorp/raft leaves to middleware): magic, CRC-32C over the entry's index, term,
// type, data and the caller's own extensions, then those extensions; it is added on the way
// into the store and removed on the way out, so raft, its log cache, the FSM and the followers
// never see it. A stable-store value gets the magic and a CRC-32C of key and value appended.
// Entries and values without the magic (written by a version before checksums) are accepted and
// counted.

// checksumMagic marks a checksummed log entry's extensions and a checksummed stable value.
var checksumMagic = []byte{'j', 'm', 'c', 1}

const checksumLen = 8 // magic + CRC-32C

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrChecksum: a log entry or stable-store value read back does not match its checksum.
var ErrChecksum = errors.New("checksum mismatch")

func entrySum(l *raft.Log, ext []byte) uint32 {
	var hdr [17]byte
	binary.BigEndian.PutUint64(hdr[0:], l.Index)
	binary.BigEndian.PutUint64(hdr[8:], l.Term)
	hdr[16] = byte(l.Type)
	h := crc32.New(castagnoli)
	_, _ = h.Write(hdr[:])
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(l.Data)))
	_, _ = h.Write(n[:])
	_, _ = h.Write(l.Data)
	_, _ = h.Write(ext)
	return h.Sum32()
}

// sealEntry returns a copy of l whose extensions carry its checksum (l itself is raft's, held
// by the log cache and sent to followers: it is not changed).
func sealEntry(l *raft.Log) *raft.Log {
	c := *l
	ext := make([]byte, checksumLen, checksumLen+len(l.Extensions))
	copy(ext, checksumMagic)
	binary.BigEndian.PutUint32(ext[4:], entrySum(l, l.Extensions))
	c.Extensions = append(ext, l.Extensions...)
	return &c
}

// openEntry checks and removes the checksum of an entry read from the store. sealed is false
// for an entry without one (an older version's).
func openEntry(l *raft.Log) (sealed bool, err error) {
	ext := l.Extensions
	if len(ext) < checksumLen || !bytes.Equal(ext[:4], checksumMagic) {
		return false, nil
	}
	own := ext[checksumLen:]
	if want, got := binary.BigEndian.Uint32(ext[4:]), entrySum(l, own); want != got {
		l.Extensions = own // what the planted bug skip-store-verify serves
		return true, fmt.Errorf("%w: log entry %d (term %d): stored crc %08x, computed %08x", ErrChecksum, l.Index, l.Term, want, got)
	}
	if len(own) == 0 {
		own = nil
	}
	l.Extensions = own
	return true, nil
}

// checksumLogStore seals every entry written and checks every entry read.
type checksumLogStore struct {
	raft.LogStore
	legacy *atomic.Uint64 // entries read without a checksum
}

func (s checksumLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s checksumLogStore) StoreLogs(ls []*raft.Log) error {
	sealed := make([]*raft.Log, len(ls))
	for i, l := range ls {
		sealed[i] = sealEntry(l)
	}
	return s.LogStore.StoreLogs(sealed)
}

func (s checksumLogStore) GetLog(index uint64, l *raft.Log) error {
	if err := s.LogStore.GetLog(index, l); err != nil {
		return err
	}
	sealed, err := openEntry(l)
	if err != nil && !failpoint.Enabled(failpoint.SkipStoreVerify) {
		return fmt.Errorf("cluster: %s: %w", raftDBFile, err)
	}
	if !sealed && s.legacy != nil {
		s.legacy.Add(1)
	}
	return nil
}

// checksumStableStore seals every value written and checks every value read.
type checksumStableStore struct{ raft.StableStore }

func stableSum(k, v []byte) uint32 {
	h := crc32.New(castagnoli)
	_, _ = h.Write(k)
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(v)
	return h.Sum32()
}

func sealValue(k, v []byte) []byte {
	out := make([]byte, len(v), len(v)+checksumLen)
	copy(out, v)
	out = append(out, checksumMagic...)
	return binary.BigEndian.AppendUint32(out, stableSum(k, v))
}

// openValue checks and removes a stable value's checksum; a value without one is returned as
// it is.
func openValue(k, v []byte) ([]byte, bool, error) {
	n := len(v) - checksumLen
	if n < 0 || !bytes.Equal(v[n:n+4], checksumMagic) {
		return v, false, nil
	}
	if want, got := binary.BigEndian.Uint32(v[n+4:]), stableSum(k, v[:n]); want != got {
		return v[:n], true, fmt.Errorf("%w: stable-store key %q: stored crc %08x, computed %08x", ErrChecksum, k, want, got)
	}
	return v[:n], true, nil
}

func (s checksumStableStore) Set(k, v []byte) error { return s.StableStore.Set(k, sealValue(k, v)) }

func (s checksumStableStore) Get(k []byte) ([]byte, error) {
	v, err := s.StableStore.Get(k)
	if err != nil {
		return nil, err
	}
	v, _, err = openValue(k, v)
	if err != nil && failpoint.Enabled(failpoint.SkipStoreVerify) {
		return v, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: %w", raftDBFile, err)
	}
	return v, nil
}

func (s checksumStableStore) SetUint64(k []byte, v uint64) error {
	return s.Set(k, binary.BigEndian.AppendUint64(nil, v))
}

func (s checksumStableStore) GetUint64(k []byte) (uint64, error) {
	v, err := s.Get(k)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("cluster: %s: %w: stable-store key %q holds %d bytes, not a uint64", raftDBFile, ErrChecksum, k, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
