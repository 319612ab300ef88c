package nemesis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/bbolt"
)

// Store faults of a JobMaster (corrupt-raft-log, corrupt-snapshot): with the JM killed, one of
// its files is damaged (a bit flipped, the file truncated, or a chunk of it copied over another
// place of it), then the JM is started again. It must refuse to start with an error naming the
// file, or run on files whose damage it verified away; never serve what it cannot verify. The
// heal makes the documented repair of a replica that refused: `jmnode raft remove` through a
// healthy JM, its data directory moved away, the JM started again to join empty
// (StoreDamager.Repair). The lying disk (lost-unsynced-writes) is a failpoint on one JM and a
// kill of it and of the leader at the fault's end (KillAtHeal).

// CorruptMode is how a file is damaged.
type CorruptMode string

// The corruption modes.
const (
	BitFlip   CorruptMode = "bit-flip"
	Truncate  CorruptMode = "truncate"
	CopyChunk CorruptMode = "copy-chunk"
)

// CorruptModes lists the modes; a scenario's faults take them in turn (fault i the mode
// i mod 3), so every run of three faults or more uses all three; the node, the file, the
// offsets and the length are drawn from the fault's seeded pick.
func CorruptModes() []CorruptMode { return []CorruptMode{BitFlip, Truncate, CopyChunk} }

// Corruption is a resolved store fault.
type Corruption struct {
	Node string      `json:"node"`
	Kind Kind        `json:"kind"` // CorruptRaftLog or CorruptSnapshot
	Mode CorruptMode `json:"mode"`
	// Pick seeds the file's choice (state.bin or meta.json), the offsets and the length.
	Pick int64 `json:"pick"`
}

// DamageRecord is what a store fault did and what the damaged JM did about it.
type DamageRecord struct {
	Fault  int         `json:"fault"`
	Node   string      `json:"node"`
	Kind   Kind        `json:"kind"`
	Mode   CorruptMode `json:"mode"`
	File   string      `json:"file,omitempty"`
	Damage string      `json:"damage"` // e.g. "bit 3 of byte 40961 flipped"
	// Changed: what the damage changed that the JM reads (StoreDamage.Changed); "" when nothing.
	Changed string `json:"changed,omitempty"`
	// Outcome: "refused" (exited naming the file), "crashed" (exited otherwise), "started"
	// (ran on), "skipped" (no file to damage yet).
	Outcome string `json:"outcome"`
	Said    string `json:"said,omitempty"` // the JM's exit error, or its last log lines
	Repair  string `json:"repair,omitempty"`
}

// The outcomes of a store fault.
const (
	OutcomeRefused = "refused"
	OutcomeCrashed = "crashed"
	OutcomeStarted = "started"
	OutcomeSkipped = "skipped"
)

// StoreDamager is implemented by targets whose JMs' data directories the nemesis reaches.
type StoreDamager interface {
	// DataDir is a JM's data directory.
	DataDir(node string) string
	// AwaitStart waits up to limit for the JM's process, just started, to exit; it reports
	// whether it exited and what it said (its exit error, else its last log lines).
	AwaitStart(node string, limit time.Duration) (exited bool, said string)
	// Repair is the documented repair of a JM that refused its files: removed from the Raft
	// configuration through a healthy JM, its data directory moved away, started again empty
	// to join. It returns what it did.
	Repair(ctx context.Context, node string) (string, error)
	// NoteDamage records a store fault's outcome for the store-damage checker.
	NoteDamage(r DamageRecord)
}

// awaitStartLimit: how long a damaged JM has to refuse its files (verification reads the whole
// raft.db) before it counts as started.
const awaitStartLimit = 15 * time.Second

// resolveStore resolves the store kinds (one call in Resolve).
func resolveStore(a *Action, rng *rand.Rand, v View) (bool, error) {
	switch a.Fault.Kind {
	case CorruptRaftLog, CorruptSnapshot:
		node := v.JMs[rng.Intn(len(v.JMs))]
		modes := CorruptModes()
		a.Corrupt = &Corruption{Node: node, Kind: a.Fault.Kind, Mode: modes[a.Fault.Index%len(modes)], Pick: rng.Int63()}
		return true, nil
	case LostUnsynced:
		if v.Leader == "" {
			return true, fmt.Errorf("%w: %s", ErrNoLeader, a.Fault.Kind)
		}
		liar := v.JMs[rng.Intn(len(v.JMs))]
		a.Failpoints = map[string]string{liar: "disk-lose-unsynced"}
		a.KillAtHeal = []string{liar}
		if v.Leader != liar {
			a.KillAtHeal = append(a.KillAtHeal, v.Leader)
		}
		return true, nil
	}
	return false, nil
}

// applyCorrupt kills the JM, damages its file, starts it again and records what it did.
func (e *Executor) applyCorrupt(ctx context.Context, a Action) error {
	c := a.Corrupt
	if c == nil {
		return nil
	}
	sd, ok := e.T.(StoreDamager)
	if !ok {
		return fmt.Errorf("%w: damage a store", ErrUnsupportedFault)
	}
	if err := e.T.Kill(c.Node); err != nil {
		return err
	}
	rec := DamageRecord{Fault: a.Fault.Index, Node: c.Node, Kind: c.Kind, Mode: c.Mode}
	d, err := DamageStore(sd.DataDir(c.Node), *c)
	file := d.File
	rec.File, rec.Damage, rec.Changed = d.File, d.What, d.Changed
	if err != nil {
		rec.Outcome, rec.Damage = OutcomeSkipped, err.Error()
	}
	if err := e.T.Revive(ctx, c.Node); err != nil {
		return err
	}
	if rec.Outcome != OutcomeSkipped {
		exited, said := sd.AwaitStart(c.Node, awaitStartLimit)
		rec.Said = said
		switch {
		case !exited:
			rec.Outcome = OutcomeStarted
		case strings.Contains(said, "is damaged") && strings.Contains(said, file):
			rec.Outcome = OutcomeRefused
		default:
			rec.Outcome = OutcomeCrashed
		}
	}
	sd.NoteDamage(rec)
	if e.Logf != nil {
		e.Logf("%s %s on %s: %s %s (changed: %s): %s", c.Kind, c.Mode, c.Node, file, rec.Damage, orNothing(rec.Changed), rec.Outcome)
	}
	return nil
}

// healStore: a JM that is not running after its files were damaged gets the documented
// repair; the JMs killed at the fault's end (KillAtHeal) are killed (first) and started again
// (last: after their failpoints are cleared).
func (e *Executor) healStore(ctx context.Context, a Action, first bool) error {
	if first {
		var errs []error
		for _, n := range a.KillAtHeal {
			errs = append(errs, e.T.Kill(n))
		}
		return errors.Join(errs...)
	}
	var errs []error
	for _, n := range a.KillAtHeal {
		errs = append(errs, e.T.Revive(ctx, n))
	}
	if c := a.Corrupt; c != nil {
		if sd, ok := e.T.(StoreDamager); ok {
			if exited, _ := sd.AwaitStart(c.Node, 0); exited {
				what, err := sd.Repair(ctx, c.Node)
				if e.Logf != nil {
					e.Logf("repair of %s: %s%s", c.Node, what, errText(err))
				}
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func orNothing(s string) string {
	if s == "" {
		return "nothing read"
	}
	return s
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return " (error: " + err.Error() + ")"
}

// StoreDamage is what a store fault did to a JM's file.
type StoreDamage struct {
	File string // the damaged file
	What string // what was done to it, e.g. "bit 3 of byte 40961 flipped"
	// Changed is what the damage changed that the JM reads as state ("log entry 57's data",
	// "state.bin's bytes"): its verification must refuse the file. "" when no draw changed
	// anything read (storestate.go).
	Changed string
}

// DamageStore damages the file a Corruption names in a JM's data directory: at the offsets its
// pick draws, drawn again while the damage changes nothing the JM reads.
func DamageStore(dataDir string, c Corruption) (StoreDamage, error) {
	rng := rand.New(rand.NewSource(c.Pick))
	var d StoreDamage
	var spans [][2]int64 // the byte ranges holding live data
	var changed func() (string, error)
	switch c.Kind {
	case CorruptRaftLog:
		d.File = filepath.Join(dataDir, "raft.db")
		var err error
		if spans, err = liveBoltSpans(d.File); err != nil {
			return d, err
		}
		if changed, err = raftDBChange(d.File); err != nil {
			return d, err
		}
	case CorruptSnapshot:
		dir, err := newestSnapshot(filepath.Join(dataDir, "snapshots"))
		if err != nil {
			return d, err
		}
		d.File = filepath.Join(dir, "state.bin")
		if rng.Intn(3) == 0 {
			d.File = filepath.Join(dir, "meta.json")
		}
		st, err := os.Stat(d.File)
		if err != nil {
			return d, err
		}
		spans = [][2]int64{{0, st.Size()}}
		if changed, err = bytesChange(d.File); err != nil {
			return d, err
		}
	default:
		return d, fmt.Errorf("nemesis: %s damages no store", c.Kind)
	}
	var err error
	d.What, d.Changed, err = damageChanging(d.File, c.Mode, spans, rng, changed)
	return d, err
}

// damageFile applies mode at offsets drawn from spans.
func damageFile(file string, mode CorruptMode, spans [][2]int64, rng *rand.Rand) (string, error) {
	var total int64
	for _, s := range spans {
		total += s[1] - s[0]
	}
	if total <= 0 {
		return "", fmt.Errorf("nemesis: %s holds no data to damage", file)
	}
	at := func() int64 {
		n := rng.Int63n(total)
		for _, s := range spans {
			if n < s[1]-s[0] {
				return s[0] + n
			}
			n -= s[1] - s[0]
		}
		return spans[0][0]
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var what string
	switch mode {
	case BitFlip:
		off, bit := at(), rng.Intn(8)
		raw[off] ^= 1 << bit
		what = fmt.Sprintf("bit %d of byte %d flipped", bit, off)
	case Truncate:
		off := at()
		raw = raw[:off]
		what = fmt.Sprintf("truncated to %d bytes", off)
	case CopyChunk:
		from, to := at(), at()
		n := int64(16 + rng.Intn(1009))
		n = min(n, int64(len(raw))-from, int64(len(raw))-to)
		copy(raw[to:to+n], append([]byte(nil), raw[from:from+n]...))
		what = fmt.Sprintf("%d bytes from offset %d copied to offset %d", n, from, to)
	default:
		return "", fmt.Errorf("nemesis: unknown corruption mode %q", mode)
	}
	return what, os.WriteFile(file, raw, 0o600)
}

// liveBoltSpans lists the byte ranges of a bolt file's leaf pages (and their overflow) that
// hold elements: where the Raft log and the stable store are, not free pages or a page's
// unused tail.
func liveBoltSpans(file string) ([][2]int64, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	db, err := bbolt.Open(file, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	ps := int64(db.Info().PageSize)
	var spans [][2]int64
	err = db.View(func(tx *bbolt.Tx) error {
		// A read-only bolt loads its freelist (which tells free pages apart) for Check only.
		for range tx.Check() {
		}
		for id := 2; ; id++ {
			p, err := tx.Page(id)
			if err != nil || p == nil {
				return err
			}
			if p.Type != "leaf" || p.Count == 0 {
				continue
			}
			start := int64(id) * ps
			if start+16 > int64(len(raw)) {
				continue
			}
			// The last element's position (relative to it) and sizes end the page's data.
			last := start + 16 + int64(p.Count-1)*16
			if last+16 > int64(len(raw)) {
				continue
			}
			pos := int64(binary.LittleEndian.Uint32(raw[last+4:]))
			ksize := int64(binary.LittleEndian.Uint32(raw[last+8:]))
			vsize := int64(binary.LittleEndian.Uint32(raw[last+12:]))
			end := min(last+pos+ksize+vsize, int64(len(raw)))
			spans = append(spans, [2]int64{start, end})
		}
	})
	return spans, err
}

// newestSnapshot is the directory of the newest snapshot (by its name: term-index-msec).
func newestSnapshot(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("no snapshot yet: %w", err)
	}
	type snap struct {
		name string
		key  [3]uint64
	}
	var snaps []snap
	for _, e := range entries {
		parts := strings.Split(e.Name(), "-")
		if !e.IsDir() || len(parts) != 3 {
			continue
		}
		var s snap
		s.name = e.Name()
		ok := true
		for i, p := range parts {
			n, err := strconv.ParseUint(p, 10, 64)
			ok = ok && err == nil
			s.key[i] = n
		}
		if ok {
			snaps = append(snaps, s)
		}
	}
	if len(snaps) == 0 {
		return "", errors.New("no snapshot yet")
	}
	sort.Slice(snaps, func(i, j int) bool {
		a, b := snaps[i].key, snaps[j].key
		for k := range a {
			if a[k] != b[k] {
				return a[k] > b[k]
			}
		}
		return false
	})
	return filepath.Join(dir, snaps[0].name), nil
}
