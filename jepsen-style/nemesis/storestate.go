package nemesis

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// What a damage changed. A store fault is meant to damage state a JobMaster reads, so that a
// verifying JobMaster must refuse it: the nemesis reads the file before and after the damage as
// the JobMaster would (raft.db through raft-boltdb: every log entry's index, term, type, data
// and extensions, every stable-store value; a snapshot file byte for byte) and draws the damage
// again when it changed nothing read (bbolt's unused element flag bits, an entry's append time,
// a chunk copied over identical bytes). The record names what changed, and the store-damage
// checker holds a JobMaster that ran on such a file to have served bytes it never verified.

// maxDraws bounds the draws of one fault's damage.
const maxDraws = 16

// raftState is what a JobMaster reads from raft.db: its log entries in key order and its
// stable-store values.
type raftState struct {
	keys    []uint64
	entries []raft.Log
	conf    map[string][]byte
}

// readRaftState reads raft.db as a JobMaster would; a damaged file may fail to open, fail to
// decode, or fault on a read past its truncated end (recovered into the error).
func readRaftState(path string) (st raftState, err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading it crashed: %v", r)
		}
	}()
	opts := &bbolt.Options{ReadOnly: true, Timeout: time.Second}
	db, err := bbolt.Open(path, 0o600, opts)
	if err != nil {
		return st, err
	}
	st.conf = map[string][]byte{}
	err = db.View(func(tx *bbolt.Tx) error {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if tx.Size() > fi.Size() {
			// A cursor over a page cut short reads zeros and may never end.
			return fmt.Errorf("truncated: %d bytes, its pages reach %d", fi.Size(), tx.Size())
		}
		if b := tx.Bucket([]byte("logs")); b != nil {
			c := b.Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				if len(k) != 8 {
					return fmt.Errorf("a log key of %d bytes", len(k))
				}
				key := binary.BigEndian.Uint64(k)
				if n := len(st.keys); n > 0 && key <= st.keys[n-1] {
					// A damaged page can lead a cursor around in a circle.
					return fmt.Errorf("log key %d after %d", key, st.keys[n-1])
				}
				st.keys = append(st.keys, key)
			}
		}
		if b := tx.Bucket([]byte("conf")); b != nil {
			return b.ForEach(func(k, v []byte) error {
				st.conf[string(k)] = append([]byte(nil), v...)
				return nil
			})
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return st, err
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: opts})
	if err != nil {
		return st, err
	}
	defer store.Close()
	for _, k := range st.keys {
		var l raft.Log
		if err := store.GetLog(k, &l); err != nil {
			return st, fmt.Errorf("log entry %d: %w", k, err)
		}
		st.entries = append(st.entries, l)
	}
	return st, nil
}

// raftChange describes how after differs from before in what a JobMaster reads ("" when it
// does not).
func raftChange(before raftState, after raftState, afterErr error) string {
	if afterErr != nil {
		return "the file no longer reads: " + afterErr.Error()
	}
	if len(before.keys) != len(after.keys) {
		return fmt.Sprintf("the log holds %d entries instead of %d", len(after.keys), len(before.keys))
	}
	for i, k := range before.keys {
		a, b := before.entries[i], after.entries[i]
		switch {
		case after.keys[i] != k:
			return fmt.Sprintf("log entry %d is stored under index %d", k, after.keys[i])
		case a.Index != b.Index || a.Term != b.Term || a.Type != b.Type:
			return fmt.Sprintf("log entry %d's header (index %d term %d type %d now read as %d, %d, %d)", k, a.Index, a.Term, a.Type, b.Index, b.Term, b.Type)
		case !bytes.Equal(a.Data, b.Data):
			return fmt.Sprintf("log entry %d's data", k)
		case !bytes.Equal(a.Extensions, b.Extensions):
			return fmt.Sprintf("log entry %d's extensions (its checksum)", k)
		}
	}
	if len(before.conf) != len(after.conf) {
		return fmt.Sprintf("the stable store holds %d values instead of %d", len(after.conf), len(before.conf))
	}
	for k, v := range before.conf {
		if !bytes.Equal(after.conf[k], v) {
			return fmt.Sprintf("the stable-store value %q", k)
		}
	}
	return ""
}

// damageChanging damages file with mode, drawing offsets from spans, until the damage changes
// what changed reports (at most maxDraws draws; each starts from the pristine file). It returns
// what was done and what it changed ("" when no draw changed anything read).
func damageChanging(file string, mode CorruptMode, spans [][2]int64, rng *rand.Rand, changed func() (string, error)) (what, change string, err error) {
	pristine, err := os.ReadFile(file)
	if err != nil {
		return "", "", err
	}
	for range maxDraws {
		if err := os.WriteFile(file, pristine, 0o600); err != nil {
			return "", "", err
		}
		if what, err = damageFile(file, mode, spans, rng); err != nil {
			return what, "", err
		}
		if change, err = changed(); err != nil || change != "" {
			return what, change, err
		}
	}
	return what + fmt.Sprintf(" (no draw of %d changed what a JobMaster reads)", maxDraws), "", nil
}

// raftDBChange reads raft.db before the damage and returns the check of each draw.
func raftDBChange(file string) (func() (string, error), error) {
	before, err := readRaftState(file)
	if err != nil {
		return nil, fmt.Errorf("nemesis: %s does not read before its damage: %w", file, err)
	}
	return func() (string, error) {
		after, err := readRaftState(file)
		return raftChange(before, after, err), nil
	}, nil
}

// bytesChange is the check of a file read whole (a snapshot's state.bin or meta.json): any
// changed or missing byte.
func bytesChange(file string) (func() (string, error), error) {
	before, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(file)
	return func() (string, error) {
		after, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		switch {
		case len(after) < len(before):
			return fmt.Sprintf("%s lost its last %d bytes", name, len(before)-len(after)), nil
		case !bytes.Equal(before, after):
			return name + "'s bytes", nil
		}
		return "", nil
	}, nil
}
