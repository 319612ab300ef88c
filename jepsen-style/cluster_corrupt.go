package jepsen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/jepsen-style/nemesis"
	"github.com/jmcluster/jmcluster/security"
)

// The store faults' side of the Cluster (nemesis.StoreDamager): a JM's data directory, what
// a damaged JM did when started, the documented repair of one that refused, and the records
// the store-damage checker reads.

// damageLog is the run's store fault records, a JSON line each.
const damageLog = "store-damage.jsonl"

var damageMu sync.Mutex

// DataDir is a JM's data directory.
func (c *Cluster) DataDir(node string) string {
	return filepath.Join(NodeDir(c.runDir, c.topo, node), "data")
}

// AwaitStart waits up to limit for a JM's process to exit; it reports whether it did and what
// it said: the line of its log naming damage, else its last log lines.
func (c *Cluster) AwaitStart(node string, limit time.Duration) (bool, string) {
	p, err := c.proc(node)
	if err != nil {
		return false, err.Error()
	}
	exited := !p.Running()
	if !exited && limit > 0 {
		select {
		case <-p.Exited():
			exited = true
		case <-time.After(limit):
		}
	}
	tail := p.LogTail(40)
	if !exited {
		return false, ""
	}
	lines := strings.Split(tail, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "is damaged") {
			return true, strings.TrimSpace(lines[i])
		}
	}
	return true, strings.Join(lines[max(0, len(lines)-8):], "\n")
}

// Repair is docs/operations.md's repair of a JM that refused its damaged files: `jmnode raft
// remove` through a running JM (forwarded to the leader), the data directory moved aside (kept
// for a post-mortem), the JM started again with its usual flags: empty, it asks to join.
func (c *Cluster) Repair(ctx context.Context, node string) (string, error) {
	bin, err := filepath.Abs(c.jmnode)
	if err != nil {
		return "", err
	}
	deadline := time.Now().Add(30 * time.Second)
	var last error
	removed := ""
	for removed == "" && time.Now().Before(deadline) && ctx.Err() == nil {
		for _, other := range JMs() {
			if other == node {
				continue
			}
			if p, err := c.proc(other); err != nil || !p.Running() {
				continue
			}
			args := []string{"raft", "remove", node, "--addr", fmt.Sprintf("%s:%d", c.topo.IP(other), PortGRPC), "--timeout", "5s"}
			args = append(args, c.operatorTLSFlags()...)
			out, err := c.Exec(ctx, other, bin, args...)
			if err == nil {
				removed = other
				break
			}
			last = fmt.Errorf("raft remove %s via %s: %w: %s", node, other, err, strings.TrimSpace(out))
		}
		if removed == "" {
			time.Sleep(time.Second)
		}
	}
	if removed == "" {
		return "", errors.Join(errors.New("jepsen: the damaged JM could not be removed from the Raft configuration"), last)
	}
	dir := c.DataDir(node)
	aside := fmt.Sprintf("%s.damaged-%d", dir, time.Now().UnixNano())
	if err := os.Rename(dir, aside); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := c.Revive(ctx, node); err != nil {
		return "", err
	}
	return fmt.Sprintf("removed from the Raft configuration via %s, data directory moved to %s, started again to join", removed, filepath.Base(aside)), nil
}

// operatorTLSFlags are the operator CLI's TLS flags in TLS mode.
func (c *Cluster) operatorTLSFlags() []string {
	if c.creds == nil {
		return nil
	}
	f := c.creds.files(security.RoleOperator, ClientCertName)
	return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}
}

// NoteDamage appends a store fault's record to the run's store-damage.jsonl.
func (c *Cluster) NoteDamage(r nemesis.DamageRecord) {
	damageMu.Lock()
	defer damageMu.Unlock()
	raw, err := json.Marshal(r)
	if err != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(c.runDir, damageLog), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(append(raw, '\n'))
}

// DamageRecords reads the run's store fault records for the store-damage checker.
func (c *Cluster) DamageRecords() []checker.Damage {
	damageMu.Lock()
	defer damageMu.Unlock()
	raw, err := os.ReadFile(filepath.Join(c.runDir, damageLog))
	if err != nil {
		return nil
	}
	var out []checker.Damage
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r nemesis.DamageRecord
		if json.Unmarshal([]byte(line), &r) == nil {
			out = append(out, checker.Damage{Fault: r.Fault, Node: r.Node, File: r.File, Mode: string(r.Mode),
				Damage: r.Damage, Changed: r.Changed, Outcome: r.Outcome, Said: r.Said})
		}
	}
	return out
}

// storeFlags are the JMs' extra flags a scenario's store faults need: corrupt-snapshot wants
// snapshots to damage, so Raft takes one every 128 entries (checked every 2 s) instead of
// every 8192.
func (s Scenario) storeFlags() []string {
	for _, k := range s.Kinds {
		if k == nemesis.CorruptSnapshot {
			return []string{"--raft-snapshot-threshold", "128", "--raft-snapshot-interval", "2s"}
		}
	}
	return nil
}

// storeKind reports the store fault kinds, which "mixed" leaves out: each damages a replica
// the heal replaces, or (lost-unsynced-writes) may be invalid by design.
func storeKind(k nemesis.Kind) bool {
	return k == nemesis.CorruptRaftLog || k == nemesis.CorruptSnapshot || k == nemesis.LostUnsynced
}

// expectInvalid: the scenarios that may be invalid by design, with the reason.
var expectInvalid = map[nemesis.Kind]string{
	nemesis.LostUnsynced: "a disk that acknowledges writes it has not made breaks Raft's assumption that what a replica acknowledged survives its crash: an entry committed with the lying replica's acknowledgement is lost when it and the leader crash and the replica that never had the entry is elected (docs/operations.md, \"What a lying disk can lose\")",
}

// describeStore is the store fault's part of a fault's description in the report.
func describeStore(a nemesis.Action) string {
	s := ""
	if c := a.Corrupt; c != nil {
		s += fmt.Sprintf("%s of %s's %s ", c.Mode, c.Node, map[nemesis.Kind]string{nemesis.CorruptRaftLog: "raft.db", nemesis.CorruptSnapshot: "newest snapshot"}[c.Kind])
	}
	if len(a.KillAtHeal) > 0 {
		s += fmt.Sprintf("kill %v at the end ", a.KillAtHeal)
	}
	return s
}
