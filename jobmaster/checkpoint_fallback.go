package jobmaster

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/checkpoint"
	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// A damaged checkpoint (docs/checkpoints.md, "A damaged checkpoint"): a task that cannot read
// the state its descriptor restores from fails with a checkpoint.RestoreError, whose message
// (the attempt's committed failure cause, and the cancel cause of its region's other members)
// names the checkpoint and the file. What the job's record holds of such causes is what is
// "known damaged": every leader derives it from the committed record alone, so the plan and
// the descriptors of a region restore agree, and a new leader knows what the old one knew as
// long as the attempts' history keeps the cause. The functions here are pure.

// RestoreRefusedCause begins the failure cause of a job failed because a region could not be
// restored from any checkpoint it may use: the restart strategy does not restart it.
const RestoreRefusedCause = "checkpoint restore refused: "

// damagedCheckpoints returns the job's retained completed checkpoints that a restore found
// damaged, each with the first failure that named it, from the failure causes of every
// subtask's current attempt and its history.
func damagedCheckpoints(rec *pb.JobRecord) map[uint64]checkpoint.RestoreFailure {
	done := rec.GetCheckpoints().GetCompleted()
	if len(done) == 0 {
		return nil
	}
	retained := make(map[uint64]bool, len(done))
	for _, ck := range done {
		retained[ck.GetId()] = true
	}
	var out map[uint64]checkpoint.RestoreFailure
	note := func(e *pb.Execution) {
		c := e.GetFailureCause()
		if c == "" {
			return
		}
		f, ok := checkpoint.ParseRestoreFailure(c)
		if !ok || !retained[f.Checkpoint] {
			return
		}
		if _, seen := out[f.Checkpoint]; !seen {
			if out == nil {
				out = map[uint64]checkpoint.RestoreFailure{}
			}
			out[f.Checkpoint] = f
		}
	}
	forEachExecution(rec, func(ev *pb.ExecutionVertex) {
		for _, h := range ev.GetHistory() {
			note(h)
		}
		if cur := ev.GetCurrent(); cur != nil {
			note(cur)
		}
	})
	return out
}

// restorePoint returns the checkpoint a region restores from: the newest retained completed
// checkpoint not known damaged; nil when the job completed none, or when every retained one is
// damaged (unusable is then true).
func restorePoint(rec *pb.JobRecord, damaged map[uint64]checkpoint.RestoreFailure) (ck *pb.CheckpointRecord, unusable bool) {
	done := rec.GetCheckpoints().GetCompleted()
	for i := len(done) - 1; i >= 0; i-- {
		if _, bad := damaged[done[i].GetId()]; !bad {
			return done[i], false
		}
	}
	return nil, len(done) > 0
}

// fallbackSafe reports whether a sink of this kind keeps its committed output exactly once when
// its region restores from a checkpoint older than one whose output it may have committed. A
// checksum sink commits a cumulative document (the whole output so far, replacing the last):
// the replayed records make the same document again. A log sink commits nothing. The file,
// NATS and PostgreSQL sinks append the output of each completed checkpoint: the replay would
// append it a second time.
func fallbackSafe(kind string) bool {
	return kind == "checksum_sink" || kind == "log_sink"
}

// restoreRefusal returns why region r cannot be restored (the job fails with it), or "": every
// retained completed checkpoint is known damaged (never a silent restart from nothing once the
// sinks may have committed output), or the newest usable one is older than a completed one
// and a sink of the region appends its committed output.
func restoreRefusal(rec *pb.JobRecord, r graph.Region, damaged map[uint64]checkpoint.RestoreFailure) string {
	if len(damaged) == 0 {
		return ""
	}
	done := rec.GetCheckpoints().GetCompleted()
	ck, unusable := restorePoint(rec, damaged)
	if unusable {
		return fmt.Sprintf("%sno usable checkpoint for region %d: every retained completed checkpoint of the job is damaged: %s",
			RestoreRefusedCause, r.ID, describeDamaged(damaged))
	}
	if ck == nil || ck.GetId() == done[len(done)-1].GetId() {
		return ""
	}
	var appenders []string
	seen := map[string]bool{}
	for _, m := range r.Members {
		if seen[m.VertexID] {
			continue
		}
		seen[m.VertexID] = true
		for _, v := range rec.GetJobGraph().GetVertices() {
			if v.GetId() != m.VertexID {
				continue
			}
			k, ok := graph.OperatorKindOf(v.GetOperator())
			if ok && k.Role == graph.RoleSink && !fallbackSafe(k.Name) {
				appenders = append(appenders, fmt.Sprintf("%s (%s)", v.GetId(), k.Name))
			}
		}
	}
	if len(appenders) == 0 {
		return ""
	}
	return fmt.Sprintf("%sregion %d cannot fall back to checkpoint %d past %s: its sinks %s append the output of each completed checkpoint, so the replay would commit output already committed a second time: %s",
		RestoreRefusedCause, r.ID, ck.GetId(), skippedIDs(done, ck.GetId()), strings.Join(appenders, ", "), describeDamaged(damaged))
}

// skippedIDs names the completed checkpoints newer than id.
func skippedIDs(done []*pb.CheckpointRecord, id uint64) string {
	var ids []string
	for _, c := range done {
		if c.GetId() > id {
			ids = append(ids, fmt.Sprint(c.GetId()))
		}
	}
	if len(ids) == 1 {
		return "completed checkpoint " + ids[0]
	}
	return "completed checkpoints " + strings.Join(ids, ", ")
}

// describeDamaged names each damaged checkpoint and its file, newest first.
func describeDamaged(damaged map[uint64]checkpoint.RestoreFailure) string {
	ids := make([]uint64, 0, len(damaged))
	for id := range damaged {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		f := damaged[id]
		part := fmt.Sprintf("checkpoint %d: file %q", id, f.Path)
		if f.Reason != "" {
			part += " (" + f.Reason + ")"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}

// restoreDescriptor points tdd at the restore point when the checkpoint graph.RestoreFrom
// chose (the newest completed) is known damaged; with no usable checkpoint it returns an error
// (the plan fails the job before that: this guards a deployment that raced it).
func restoreDescriptor(rec *pb.JobRecord, damaged map[uint64]checkpoint.RestoreFailure, tdd *pb.TaskDeploymentDescriptor) error {
	if tdd == nil || tdd.GetRestoreCheckpointId() == 0 {
		return nil
	}
	if _, bad := damaged[tdd.GetRestoreCheckpointId()]; !bad {
		return nil
	}
	ck, _ := restorePoint(rec, damaged)
	if ck == nil {
		return fmt.Errorf("%sno usable checkpoint for %s[%d]: %s", RestoreRefusedCause, tdd.GetVertexId(), tdd.GetSubtaskIndex(), describeDamaged(damaged))
	}
	ack := fsm.FindCheckpointAck(ck, tdd.GetVertexId(), tdd.GetSubtaskIndex())
	if ack == nil {
		return fmt.Errorf("%scheckpoint %d has no state of %s[%d]", RestoreRefusedCause, ck.GetId(), tdd.GetVertexId(), tdd.GetSubtaskIndex())
	}
	tdd.RestoreCheckpointId, tdd.RestoreFrom = ck.GetId(), proto.CloneOf(ack)
	return nil
}
