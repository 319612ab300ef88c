package jepsen

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/jepsen-style/client"
	"github.com/jmcluster/jmcluster/jepsen-style/nemesis"
	"github.com/jmcluster/jmcluster/jepsen-style/netns"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The corrupt-checkpoint fault's side of the cluster: the damage of a state file in the
// run's shared checkpoints/ directory, and what was damaged, for the checkpoint-fallback
// checker.

// stateHeaderSize is the length of a state file's header (magic, version, CRC-32C, length:
// checkpoint.HeaderSize, checkpoint/DESIGN.md), which a bit flip and a copied chunk leave alone.
const stateHeaderSize = 20

// damagedStates is what the corrupt-checkpoint faults of a run damaged.
type damagedStates struct {
	mu   sync.Mutex
	list []checker.DamagedState
}

// ckptDamages holds each cluster's damages (a cluster is one run).
var ckptDamages sync.Map // *Cluster -> *damagedStates

func (c *Cluster) damages() *damagedStates {
	d, _ := ckptDamages.LoadOrStore(c, &damagedStates{})
	return d.(*damagedStates)
}

// DamagedStates lists the state files the run's corrupt-checkpoint faults damaged.
func (c *Cluster) DamagedStates() []checker.DamagedState {
	d := c.damages()
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]checker.DamagedState(nil), d.list...)
}

// CorruptCheckpoint damages the state file a source task that ran on tm wrote for the stream
// job's newest completed checkpoint (nemesis.CheckpointCorrupter), once tm is down, so the
// task's region restores from it: its restore must refuse it and fall back. The source's state
// is its position: a bit flip the restore did not catch would make the region's sink count a
// duplicate or a gap. Nothing is damaged when tm ran no source task, or when the newest
// completed checkpoint is one damaged already (none completed since: a second damage could
// leave no usable checkpoint, which is not this fault's point).
func (c *Cluster) CorruptCheckpoint(ctx context.Context, tm string, d nemesis.CheckpointDamage) (string, error) {
	root := CheckpointDir(c.runDir)
	entries, err := os.ReadDir(root)
	if err != nil {
		return "", err
	}
	pool, err := c.ckptPool()
	if err != nil {
		return "", err
	}
	defer pool.Close()
	rng := rand.New(rand.NewSource(d.Seed))
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rec, _ := client.ConsistentRead(rctx, pool, e.Name())
		cancel()
		done := rec.GetCheckpoints().GetCompleted()
		if len(done) == 0 {
			continue
		}
		newest := done[len(done)-1]
		if c.wasDamaged(newest.GetId()) {
			return "", nil
		}
		var subtasks []int32
		for _, ejv := range rec.GetExecutionGraph().GetVertices() {
			for _, ev := range ejv.GetSubtasks() {
				if ejv.GetVertexId() == "source" && ev.GetCurrent().GetTmGrpcAddress() != "" &&
					hostOf(ev.GetCurrent().GetTmGrpcAddress()) == c.topo.IP(tm) {
					subtasks = append(subtasks, ev.GetSubtaskIndex())
				}
			}
		}
		if len(subtasks) == 0 {
			return "", nil
		}
		sort.Slice(subtasks, func(i, j int) bool { return subtasks[i] < subtasks[j] })
		sub := subtasks[rng.Intn(len(subtasks))]
		rel := ""
		for _, a := range newest.GetAcks() {
			if a.GetVertexId() == "source" && a.GetSubtaskIndex() == sub {
				rel = a.GetStatePath()
			}
		}
		if rel == "" {
			dir := fmt.Sprintf("%s/chk-%d", e.Name(), newest.GetId()) // checkpoint/DESIGN.md, "Layout"
			matches, _ := filepath.Glob(filepath.Join(root, dir, fmt.Sprintf("source-%d-*.state", sub)))
			if len(matches) == 0 {
				return "", fmt.Errorf("corrupt-checkpoint: no state of source[%d] in checkpoint %d of job %s", sub, newest.GetId(), e.Name())
			}
			sort.Strings(matches)
			r, _ := filepath.Rel(root, matches[len(matches)-1])
			rel = filepath.ToSlash(r)
		}
		full := filepath.Join(root, filepath.FromSlash(rel))
		b, err := os.ReadFile(full)
		if err != nil {
			return "", fmt.Errorf("corrupt-checkpoint: %w", err)
		}
		out, what, err := nemesis.Damage(b, stateHeaderSize, d.Kind, rng)
		if err != nil {
			return "", fmt.Errorf("corrupt-checkpoint: %s: %w", rel, err)
		}
		if err := os.WriteFile(full, out, 0o644); err != nil {
			return "", fmt.Errorf("corrupt-checkpoint: %w", err)
		}
		ds := c.damages()
		ds.mu.Lock()
		ds.list = append(ds.list, checker.DamagedState{Checkpoint: newest.GetId(), Path: rel, Kind: string(d.Kind), What: what, TM: tm, At: time.Now()})
		ds.mu.Unlock()
		return fmt.Sprintf("%s (source[%d] of checkpoint %d, the newest completed; %s down): %s, %s", rel, sub, newest.GetId(), tm, d.Kind, what), nil
	}
	return "", nil
}

// wasDamaged reports whether a state of checkpoint id was damaged already.
func (c *Cluster) wasDamaged(id uint64) bool {
	for _, d := range c.DamagedStates() {
		if d.Checkpoint == id {
			return true
		}
	}
	return false
}

// ckptPool connects to every JM from the client's namespace, as the run's clients do.
func (c *Cluster) ckptPool() (*client.Pool, error) {
	addrs := map[string]string{}
	for _, n := range JMs() {
		addrs[n] = fmt.Sprintf("%s:%d", c.topo.IP(n), PortGRPC)
	}
	sec, err := c.ClientTLS()
	if err != nil {
		return nil, err
	}
	return client.NewPool(addrs, netns.Dialer(c.topo.NS(ClientNode)), sec)
}

// hostOf is the host of a host:port address.
func hostOf(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i]
		}
	}
	return addr
}

// checkpointFallbackInput is the checkpoint-fallback checker's input: the states the run's
// faults damaged and the stream job's final record.
func (r *run) checkpointFallbackInput(final *pb.JobRecord) checker.FallbackInput {
	return checker.FallbackInput{JobID: r.streamID, Damaged: r.cluster.DamagedStates(), Final: final}
}

// sourceTMs lists the TMs running a source task of the stream job, read for a
// corrupt-checkpoint fault only (nil for the other kinds, or when the read fails: the fault
// then picks among every TM).
func (r *run) sourceTMs(ctx context.Context, k nemesis.Kind) []string {
	if k != nemesis.CorruptCheckpoint {
		return nil
	}
	return r.tmsOf(ctx, r.streamID, "source")
}

// pipelineTMs lists the TMs running a task of the pipeline job, read for kill-tm and
// restart-tm when the run aims them at the pipeline (nil otherwise, or when the read fails:
// the fault then picks among every TM).
func (r *run) pipelineTMs(ctx context.Context, k nemesis.Kind) []string {
	if !r.cfg.Pipeline.AimTMFaults || r.pipe == nil || (k != nemesis.KillTM && k != nemesis.RestartTM) {
		return nil
	}
	return r.tmsOf(ctx, r.pipe.jobID, "")
}

// tmsOf lists, sorted, the TMs running a current attempt of the job's vertex (of any vertex
// when vertex is "").
func (r *run) tmsOf(ctx context.Context, jobID, vertex string) []string {
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	rec, _ := client.ConsistentRead(rctx, r.pool, jobID)
	byIP := map[string]string{}
	for _, tm := range r.topo.TMs() {
		byIP[r.topo.IP(tm)] = tm
	}
	var out []string
	for _, ejv := range rec.GetExecutionGraph().GetVertices() {
		if vertex != "" && ejv.GetVertexId() != vertex {
			continue
		}
		for _, ev := range ejv.GetSubtasks() {
			if tm := byIP[hostOf(ev.GetCurrent().GetTmGrpcAddress())]; tm != "" && !slices.Contains(out, tm) {
				out = append(out, tm)
			}
		}
	}
	sort.Strings(out)
	return out
}
