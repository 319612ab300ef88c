package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// checkpointView reads a job's checkpoints from the first live JobMaster that serves them.
func (d *procs) checkpointView(id string) (*pb.JobCheckpointsView, error) {
	var lastErr error
	for _, p := range d.JMs {
		if !p.Running() {
			continue
		}
		c := d.client(p.Addrs.GRPC)
		var v *pb.JobCheckpointsView
		err := c.call(time.Second, func(ctx context.Context) error {
			r, err := c.client().GetJob(ctx, &pb.GetJobRequest{JobId: id, View: pb.JobView_JOB_VIEW_CHECKPOINTS})
			v = r.GetCheckpoints()
			return err
		})
		c.cc.Close()
		if err == nil {
			return v, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func completedRows(v *pb.JobCheckpointsView) []*pb.CheckpointRow {
	var out []*pb.CheckpointRow
	for _, r := range v.GetCheckpoints() {
		if r.Status == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
			out = append(out, r)
		}
	}
	return out
}

// TestProcessCheckpointsThroughALeaderKill runs real processes, every one with the same
// --checkpoint-dir: a job submitted with a checkpoint interval completes checkpoints; the
// leader process is killed (SIGKILL); the new leader completes checkpoints of its own epoch
// with higher ids, the tasks keep their attempts, and the shared root holds no checkpoint the
// record no longer names below the ones it keeps.
func TestProcessCheckpointsThroughALeaderKill(t *testing.T) {
	t.Parallel()
	var root string
	d := newProcessClusterOf(t, fastProcs, func(dir string, nodes []proccluster.Node) {
		root = filepath.Join(dir, "checkpoints")
		for i := range nodes {
			nodes[i].Flags = append(slices.Clone(nodes[i].Flags), "--checkpoint-dir", root)
		}
	})
	ctx := context.Background()
	if err := d.waitTMs(ctx, 30*time.Second, 3, 0); err != nil {
		t.Fatal(err)
	}
	jg := testcluster.StreamingChain("process-checkpoints", 2, 100, 0)
	jg.JobId = newJobID()
	jg.CheckpointConfig = &pb.CheckpointConfig{IntervalMs: 200, Retained: 2}
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lc := d.client(leader.LeaderGrpcAddress)
	if err := lc.call(15*time.Second, func(ctx context.Context) error {
		_, err := lc.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
		return err
	}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	lc.cc.Close()
	before, err := d.waitAllRunning(ctx, jg.JobId, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	testcluster.WaitFor(t, 60*time.Second, "two checkpoints completed", func() (bool, string) {
		v, err := d.checkpointView(jg.JobId)
		if done := completedRows(v); err == nil && v.CompletedCount >= 2 && len(done) > 0 {
			last = done[len(done)-1].Id
			return true, ""
		}
		return false, fmt.Sprint(v, err)
	})

	leader, err = d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Proc(leader.LeaderId).Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	next, err := d.waitLeader(ctx, leader.LeaderId, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 60*time.Second, fmt.Sprintf("a checkpoint of epoch %d after %d completed", next.Epoch, last), func() (bool, string) {
		v, err := d.checkpointView(jg.JobId)
		for _, r := range completedRows(v) {
			if r.Id > last && r.Epoch >= next.Epoch {
				return true, ""
			}
		}
		return false, fmt.Sprint(v, err)
	})
	after, _, err := d.getJob(jg.JobId)
	if err != nil {
		t.Fatal(err)
	}
	if changed := compareAttempts(before, after); len(changed) != 0 {
		t.Fatalf("tasks restarted through the leader kill: %v", changed)
	}
	testcluster.WaitFor(t, 20*time.Second, "no checkpoint below the retained ones in storage", func() (bool, string) {
		v, err := d.checkpointView(jg.JobId)
		done := completedRows(v)
		if err != nil || len(done) == 0 {
			return false, fmt.Sprint(v, err)
		}
		stored, _ := filepath.Glob(filepath.Join(root, jg.JobId, "chk-*"))
		for _, s := range stored {
			var id uint64
			if _, err := fmt.Sscanf(filepath.Base(s), "chk-%d", &id); err == nil && id < done[0].Id {
				return false, fmt.Sprintf("stored %v, retained from %d", stored, done[0].Id)
			}
		}
		return true, ""
	})
}
