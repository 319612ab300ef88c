package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// Before raft.NewRaft the replica verifies what it is about to serve (VerifyDataDir): raft.db's
// bolt structure (bbolt's own consistency check, with its panics and memory faults on a
// damaged file recovered), its size against the pages its metadata claims, every Raft log
// entry's checksum and the log's continuity, the stable store's values, and the newest snapshot
// (its meta.json against the checksum written beside it and against its directory name, its
// state.bin against the CRC-64 in meta.json) and that the log continues where it ends. Any
// damage ends the start with a DamageError naming the file: Raft cannot rebuild a replica's log
// in place (deleting it forgets votes and acknowledged entries), so the repair is the
// operator's (docs/operations.md, "A replica's files are damaged").

// snapshotsDir is hashicorp/raft's FileSnapshotStore directory inside the data dir.
const snapshotsDir = "snapshots"

// metaSumFile holds the CRC-32C of a snapshot's meta.json, written beside it once the snapshot
// is complete (raft's CRC covers state.bin only).
const metaSumFile = "meta.json.crc"

// ErrDamaged is the error every DamageError matches with errors.Is.
var ErrDamaged = errors.New("damaged replica files")

// DamageError: a file of the replica's data dir failed verification.
type DamageError struct {
	ID     string // the replica's server id
	Dir    string // its data dir
	File   string // the damaged file
	Damage string // what is wrong with it
}

func (e *DamageError) Error() string {
	return fmt.Sprintf("cluster: %s is damaged: %s. This JobMaster refuses to start on state it cannot verify. "+
		"Repair: run `jmnode raft remove %s` against a healthy JobMaster, move the data directory %s away, and start this "+
		"JobMaster again with its usual flags: it joins as an empty replica and receives the state from the leader "+
		"(docs/operations.md, \"A replica's files are damaged\")", e.File, e.Damage, e.ID, e.Dir)
}

func (e *DamageError) Unwrap() error { return ErrDamaged }

// VerifyReport is what VerifyDataDir found on undamaged files.
type VerifyReport struct {
	Entries       uint64 // log entries checked
	LastIndex     uint64 // the log's last index
	LegacyEntries uint64 // of them, written without a checksum (an older version)
	LegacyValues  int    // stable-store values without a checksum
	Snapshot      string // the newest snapshot's id, "" when none
	LegacySnap    bool   // the newest snapshot has no meta.json checksum
}

// VerifyDataDir checks a replica's data dir (id names the replica in the error). An empty or
// missing data dir is fine.
func VerifyDataDir(id, dir string) (VerifyReport, error) {
	var rep VerifyReport
	damage := func(file, format string, args ...any) error {
		return &DamageError{ID: id, Dir: dir, File: file, Damage: fmt.Sprintf(format, args...)}
	}
	dbPath := filepath.Join(dir, raftDBFile)
	first, last := uint64(0), uint64(0)
	if _, err := os.Stat(dbPath); err == nil {
		if what := checkBolt(dbPath); what != "" {
			return rep, damage(dbPath, "%s", what)
		}
		var what string
		first, last, what = checkLog(dbPath, &rep)
		rep.LastIndex = last
		if what != "" {
			return rep, damage(dbPath, "%s", what)
		}
	} else if !os.IsNotExist(err) {
		return rep, fmt.Errorf("cluster: %s: %w", dbPath, err)
	}
	snap, file, what := checkNewestSnapshot(filepath.Join(dir, snapshotsDir), &rep)
	if what != "" {
		return rep, damage(file, "%s", what)
	}
	// The log must continue where the state it starts from (the snapshot, or the empty state)
	// ends; raft would otherwise find an entry it must apply missing.
	if last > 0 {
		start := uint64(0)
		if snap != nil {
			start = snap.Index
		}
		if first > start+1 {
			where := "no snapshot"
			if snap != nil {
				where = "the newest snapshot " + snap.ID + " ends at index " + strconv.FormatUint(snap.Index, 10)
			}
			return rep, damage(dbPath, "the log starts at index %d but %s: entries %d-%d are missing", first, where, start+1, first-1)
		}
	}
	return rep, nil
}

// guard runs f, turning a panic or a memory fault (a read past the end of a truncated,
// memory-mapped file) into a description.
func guard(f func() string) (what string) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			what = fmt.Sprintf("reading it crashed: %v", r)
		}
	}()
	return f()
}

// checkBolt runs bbolt's consistency check and compares the file's size with its pages.
func checkBolt(path string) string {
	return guard(func() string {
		st, err := os.Stat(path)
		if err != nil {
			return err.Error()
		}
		db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
		if err != nil {
			return "bolt cannot open it: " + err.Error()
		}
		defer db.Close()
		var what string
		_ = db.View(func(tx *bbolt.Tx) error {
			if tx.Size() > st.Size() {
				what = fmt.Sprintf("truncated: %d bytes, its pages reach %d", st.Size(), tx.Size())
				return nil
			}
			var errs []string
			for err := range tx.Check() {
				if len(errs) < 3 {
					errs = append(errs, err.Error())
				}
			}
			if len(errs) > 0 {
				what = "bolt consistency check: " + strings.Join(errs, "; ")
			}
			return nil
		})
		return what
	})
}

// checkLog reads every log entry and stable value through the checksum layer.
func checkLog(path string, rep *VerifyReport) (first, last uint64, what string) {
	what = guard(func() string {
		store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: time.Second}})
		if err != nil {
			return "raft-boltdb cannot open it: " + err.Error()
		}
		defer store.Close()
		if first, err = store.FirstIndex(); err != nil {
			return "first index: " + err.Error()
		}
		if last, err = store.LastIndex(); err != nil {
			return "last index: " + err.Error()
		}
		var sealedAt uint64
		for i := first; last > 0 && i <= last; i++ {
			var l raft.Log
			if err := store.GetLog(i, &l); err != nil {
				if errors.Is(err, raft.ErrLogNotFound) {
					return fmt.Sprintf("log entry %d is missing (the log runs from %d to %d)", i, first, last)
				}
				return fmt.Sprintf("log entry %d cannot be decoded: %v", i, err)
			}
			if l.Index != i {
				return fmt.Sprintf("log entry %d is stored under index %d", l.Index, i)
			}
			sealed, err := openEntry(&l)
			if err != nil {
				return err.Error()
			}
			rep.Entries++
			switch {
			case sealed:
				sealedAt = i
			case sealedAt > 0:
				// This version never writes an entry without a checksum after one with it.
				return fmt.Sprintf("log entry %d has no checksum but entry %d before it has one (its checksum is damaged)", i, sealedAt)
			default:
				rep.LegacyEntries++
			}
		}
		for _, k := range []string{"CurrentTerm", "LastVoteTerm", "LastVoteCand"} {
			v, err := store.Get([]byte(k))
			if err != nil {
				continue // not written yet
			}
			_, sealed, err := openValue([]byte(k), v)
			if err != nil {
				return err.Error()
			}
			if !sealed {
				rep.LegacyValues++
			}
		}
		return ""
	})
	return first, last, what
}

// snapshotMeta is hashicorp/raft's meta.json (fileSnapshotMeta).
type snapshotMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

type snapName struct {
	dir               string
	term, index, msec uint64
}

// checkNewestSnapshot verifies the snapshot raft will restore: the newest by its directory
// name (term-index-msec, as raft names and orders them; a name is not in the files a disk
// fault damages). It returns its meta, or the damaged file and what is wrong.
func checkNewestSnapshot(dir string, rep *VerifyReport) (*snapshotMeta, string, string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", "" // no snapshot store yet
	}
	var names []snapName
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		parts := strings.Split(e.Name(), "-")
		if len(parts) != 3 {
			continue
		}
		var n snapName
		var errs [3]error
		n.dir = e.Name()
		n.term, errs[0] = strconv.ParseUint(parts[0], 10, 64)
		n.index, errs[1] = strconv.ParseUint(parts[1], 10, 64)
		n.msec, errs[2] = strconv.ParseUint(parts[2], 10, 64)
		if errors.Join(errs[:]...) == nil {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, "", ""
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := names[i], names[j]
		if a.term != b.term {
			return a.term > b.term
		}
		if a.index != b.index {
			return a.index > b.index
		}
		return a.msec > b.msec
	})
	newest := names[0]
	rep.Snapshot = newest.dir
	snapDir := filepath.Join(dir, newest.dir)
	metaPath, statePath := filepath.Join(snapDir, "meta.json"), filepath.Join(snapDir, "state.bin")
	raw, err := os.ReadFile(metaPath)
	if err != nil {
		return nil, metaPath, "cannot be read: " + err.Error()
	}
	if sum, err := os.ReadFile(filepath.Join(snapDir, metaSumFile)); err == nil {
		if want, got := strings.TrimSpace(string(sum)), fmt.Sprintf("%08x", crc32.Checksum(raw, castagnoli)); want != got {
			return nil, metaPath, fmt.Sprintf("%s: stored crc %s, computed %s", ErrChecksum, want, got)
		}
	} else {
		rep.LegacySnap = true
	}
	var meta snapshotMeta
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&meta); err != nil {
		return nil, metaPath, "not valid JSON: " + err.Error()
	}
	if meta.ID != newest.dir || meta.Term != newest.term || meta.Index != newest.index {
		return nil, metaPath, fmt.Sprintf("names snapshot %q at term %d index %d, but it is in directory %q", meta.ID, meta.Term, meta.Index, newest.dir)
	}
	f, err := os.Open(statePath)
	if err != nil {
		return nil, statePath, "cannot be read: " + err.Error()
	}
	defer f.Close()
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, statePath, "cannot be read: " + err.Error()
	}
	if n != meta.Size {
		return nil, statePath, fmt.Sprintf("holds %d bytes, meta.json says %d", n, meta.Size)
	}
	if !bytes.Equal(h.Sum(nil), meta.CRC) {
		return nil, statePath, fmt.Sprintf("%s: CRC-64 %x, meta.json says %x", ErrChecksum, h.Sum(nil), meta.CRC)
	}
	return &meta, "", ""
}

// checksumSnapshotStore writes, after each snapshot is complete, the checksum of its meta.json
// beside it.
type checksumSnapshotStore struct {
	raft.SnapshotStore
	dir string // the snapshot store's directory
}

func (s checksumSnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, c raft.Configuration, ci uint64, t raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, c, ci, t)
	if err != nil {
		return nil, err
	}
	return metaSumSink{sink, s.dir}, nil
}

type metaSumSink struct {
	raft.SnapshotSink
	dir string
}

func (s metaSumSink) Close() error {
	if err := s.SnapshotSink.Close(); err != nil {
		return err
	}
	snapDir := filepath.Join(s.dir, s.ID())
	raw, err := os.ReadFile(filepath.Join(snapDir, "meta.json"))
	if err != nil {
		return fmt.Errorf("cluster: checksum of the snapshot's meta.json: %w", err)
	}
	return writeSynced(filepath.Join(snapDir, metaSumFile), fmt.Appendf(nil, "%08x\n", crc32.Checksum(raw, castagnoli)))
}

// writeSynced writes a small file through a temporary one, fsynced, then renamed.
func writeSynced(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// verifyOnStart runs VerifyDataDir before the stores are opened, unless the planted bug
// skip-store-verify turns it off.
func verifyOnStart(cfg Config, logger hclog.Logger) error {
	if failpoint.Enabled(failpoint.SkipStoreVerify) {
		logger.Warn("store verification skipped (failpoint skip-store-verify)")
		return nil
	}
	start := time.Now()
	rep, err := VerifyDataDir(cfg.ID, cfg.DataDir)
	if err != nil {
		return err
	}
	logger.Info("stores verified", "entries", rep.Entries, "last_index", rep.LastIndex, "entries_without_checksum", rep.LegacyEntries,
		"stable_values_without_checksum", rep.LegacyValues, "snapshot", rep.Snapshot, "snapshot_meta_without_checksum", rep.LegacySnap,
		"took", time.Since(start).Round(time.Millisecond))
	return nil
}
