package checkpoint

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path"
	"path/filepath"
)

// State is one task's state to write for a checkpoint, an item of WriteBatch.
type State struct {
	Job     string
	ID      uint64
	Vertex  string
	Subtask int32
	Attempt int32
	Data    []byte
}

// Written is what WriteBatch did with one State: the path to acknowledge (relative to the
// root) and the payload's CRC-32C, or why it was not written.
type Written struct {
	Path     string
	Checksum uint32
	Err      error
}

// batchDir is a checkpoint directory a batch writes into, opened once for all its files.
type batchDir struct {
	root *os.Root
	err  error // creating or opening it failed
	used bool  // a state was renamed into it
}

// WriteBatch stores many task states with the guarantees of Write (each file whole or absent,
// durable when its result has no error) and few waits for the disk: every state is written to
// its temporary file first, then all of them are made durable at once (syncFiles: one syncfs
// of the file system on Linux, else an fsync per file), renamed into place, and each directory
// they went into is synced once. Write's cost is two fsyncs per state; a batch's is one sync
// in all plus one per directory. Each checkpoint directory is opened once per batch. The
// results are in the order of states.
func (s *Store) WriteBatch(states []State) []Written {
	res := make([]Written, len(states))
	tmps := make([]string, len(states)) // base names of the temporary files written
	dirs := map[string]*batchDir{}
	defer func() {
		for _, d := range dirs {
			if d.root != nil {
				_ = d.root.Close()
			}
		}
	}()
	var files []string // the temporary files written, relative to the root, to sync
	for i, st := range states {
		tmp, err := s.writeTemp(st, &res[i], dirs)
		if err != nil {
			res[i].Err = err
			continue
		}
		tmps[i] = tmp
		files = append(files, path.Dir(res[i].Path)+"/"+tmp)
	}
	if len(files) == 0 {
		return res
	}
	if err := s.syncFiles(files); err != nil {
		for i := range res {
			if tmps[i] != "" {
				_ = dirs[path.Dir(res[i].Path)].root.Remove(tmps[i])
				res[i].Err = stateErr(res[i].Path, err, "sync")
			}
		}
		return res
	}
	for i := range res {
		if tmps[i] == "" {
			continue
		}
		d := dirs[path.Dir(res[i].Path)]
		if err := d.root.Rename(tmps[i], path.Base(res[i].Path)); err != nil {
			_ = d.root.Remove(tmps[i])
			res[i].Err = stateErr(res[i].Path, err, "rename into place")
			tmps[i] = ""
			continue
		}
		d.used = true
	}
	for name, d := range dirs {
		if !d.used {
			continue
		}
		if err := syncRoot(d.root); err != nil {
			for i := range res {
				if tmps[i] != "" && path.Dir(res[i].Path) == name {
					res[i].Err = stateErr(res[i].Path, err, "sync its directory")
				}
			}
		}
	}
	return res
}

// writeTemp checks st, creates its checkpoint's directory (once per batch: dirs) and writes its
// temporary file there, unsynced; it fills w's path and checksum and returns the temporary
// file's name in that directory.
func (s *Store) writeTemp(st State, w *Written, dirs map[string]*batchDir) (string, error) {
	rel, err := StatePath(st.Job, st.ID, st.Vertex, st.Subtask, st.Attempt)
	if err != nil {
		return "", err
	}
	w.Path = rel
	if int64(len(st.Data)) > s.max {
		return "", stateErr(rel, ErrStateTooLarge, "%d bytes, the limit (max state size) is %d", len(st.Data), s.max)
	}
	dir := path.Dir(rel)
	d := dirs[dir]
	if d == nil {
		d = &batchDir{}
		if d.err = s.mkdirs(st.Job, dir); d.err == nil {
			d.root, d.err = s.root.OpenRoot(dir)
		}
		dirs[dir] = d
	}
	if d.err != nil {
		return "", stateErr(rel, d.err, "create its directory")
	}
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return "", stateErr(rel, err, "name a temporary file")
	}
	tmp := "." + path.Base(rel) + ".tmp-" + hex.EncodeToString(suffix[:])
	w.Checksum = Checksum(st.Data)
	if err := createFile(d.root, tmp, w.Checksum, st.Data, false); err != nil {
		_ = d.root.Remove(tmp)
		return "", stateErr(rel, err, "write")
	}
	return tmp, nil
}

// syncManyFrom is the number of files from which a batch syncs its file system at once
// (syncfs, on Linux) rather than each file: syncfs waits for every writer's dirty data on the
// file system, which on a busy one costs more than a few fsyncs; a few fsyncs cost the process
// little, where hundreds of them in a row hold its Ps (docs/benchmarks.md).
const syncManyFrom = 32

// fsyncEach makes the named files (relative to the root) durable one by one.
func (s *Store) fsyncEach(names []string) error {
	for _, n := range names {
		f, err := s.root.OpenFile(filepath.FromSlash(n), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
