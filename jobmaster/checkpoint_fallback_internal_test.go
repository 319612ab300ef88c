package jobmaster

import (
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/checkpoint"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// fallbackRecord is a job source -> sink (one region) whose completed checkpoints are ids, each
// with both subtasks' states; causes are failure causes of sink[0]'s history, oldest first.
func fallbackRecord(sink *pb.Operator, ids []uint64, causes ...string) *pb.JobRecord {
	var done []*pb.CheckpointRecord
	for _, id := range ids {
		done = append(done, &pb.CheckpointRecord{Id: id, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED, Acks: []*pb.TaskCheckpointAck{
			{VertexId: "sink", SubtaskIndex: 0, StatePath: stateOf(id, "sink")},
			{VertexId: "src", SubtaskIndex: 0, StatePath: stateOf(id, "src")},
		}})
	}
	var hist []*pb.Execution
	for _, c := range causes {
		hist = append(hist, &pb.Execution{State: pb.ExecutionState_EXECUTION_STATE_FAILED, FailureCause: c})
	}
	return &pb.JobRecord{
		JobGraph: &pb.JobGraph{Vertices: []*pb.JobVertex{
			{Id: "src", Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{}}}},
			{Id: "sink", Operator: sink},
		}},
		ExecutionGraph: &pb.ExecutionGraph{Vertices: []*pb.ExecutionJobVertex{
			{VertexId: "src", Subtasks: []*pb.ExecutionVertex{{VertexId: "src", Current: &pb.Execution{State: pb.ExecutionState_EXECUTION_STATE_CANCELED}}}},
			{VertexId: "sink", Subtasks: []*pb.ExecutionVertex{{VertexId: "sink", History: hist, Current: &pb.Execution{State: pb.ExecutionState_EXECUTION_STATE_CANCELED}}}},
		}},
		Checkpoints: &pb.JobCheckpoints{Completed: done},
	}
}

func stateOf(id uint64, vertex string) string {
	p, _ := checkpoint.StatePath("job", id, vertex, 0, 0)
	return p
}

// restoreCause is the failure cause a TaskManager reports for a damaged state of checkpoint id.
func restoreCause(id uint64, vertex string) string {
	err := checkpoint.AsRestoreError(&checkpoint.StateError{Path: stateOf(id, vertex), Err: checkpoint.ErrChecksumMismatch}, id, vertex, 0, 0)
	return "restore: " + err.Error()
}

// TestRestoreFallbackRules: the restore point and the refusals, from the record alone.
func TestRestoreFallbackRules(t *testing.T) {
	checksum := &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "x"}}}
	postgres := &pb.Operator{Kind: &pb.Operator_PostgresSink{PostgresSink: &pb.PostgresSink{}}}
	region := graph.Region{ID: 0, Members: []graph.SubtaskRef{{VertexID: "src"}, {VertexID: "sink"}}}
	for _, tc := range []struct {
		name    string
		rec     *pb.JobRecord
		restore uint64 // 0: none
		refusal string // a part of the refusal, "" for none
	}{
		{"no checkpoint completed: restore from nothing", fallbackRecord(checksum, nil), 0, ""},
		{"nothing damaged: the newest", fallbackRecord(checksum, []uint64{4, 5, 6}), 6, ""},
		{"the newest damaged: the previous one", fallbackRecord(checksum, []uint64{4, 5, 6}, restoreCause(6, "sink")), 5, ""},
		{"a region member's cancel cause quotes it", fallbackRecord(checksum, []uint64{4, 5, 6}, "region restart: "+restoreCause(6, "src")), 5, ""},
		{"two damaged: the oldest", fallbackRecord(checksum, []uint64{4, 5, 6}, restoreCause(6, "sink"), restoreCause(5, "src")), 4, ""},
		{"a checkpoint no longer retained does not count", fallbackRecord(checksum, []uint64{4, 5, 6}, restoreCause(3, "sink")), 6, ""},
		{"every retained one damaged: the job fails naming the files", fallbackRecord(checksum, []uint64{5, 6}, restoreCause(6, "sink"), restoreCause(5, "sink")), 0,
			`no usable checkpoint for region 0: every retained completed checkpoint of the job is damaged: checkpoint 6: file "job/chk-6/sink-0-0.state" (state checksum mismatch); checkpoint 5: file "job/chk-5/sink-0-0.state" (state checksum mismatch)`},
		{"an appending sink refuses the fallback", fallbackRecord(postgres, []uint64{4, 5, 6}, restoreCause(6, "sink")), 5,
			`region 0 cannot fall back to checkpoint 5 past completed checkpoint 6: its sinks sink (postgres_sink) append`},
		{"an appending sink restores the newest when it is whole", fallbackRecord(postgres, []uint64{4, 5, 6}), 6, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			damaged := damagedCheckpoints(tc.rec)
			ck, _ := restorePoint(tc.rec, damaged)
			if ck.GetId() != tc.restore {
				t.Fatalf("restore point %d, want %d (damaged %v)", ck.GetId(), tc.restore, damaged)
			}
			got := restoreRefusal(tc.rec, region, damaged)
			if (tc.refusal == "") != (got == "") || !strings.Contains(got, tc.refusal) {
				t.Fatalf("refusal %q, want one containing %q", got, tc.refusal)
			}
			if got != "" && !strings.HasPrefix(got, RestoreRefusedCause) {
				t.Fatalf("refusal %q does not begin with %q", got, RestoreRefusedCause)
			}
			// The descriptor of a sink deployed now restores from the restore point.
			tdd := &pb.TaskDeploymentDescriptor{VertexId: "sink"}
			if n := len(tc.rec.GetCheckpoints().GetCompleted()); n > 0 {
				newest := tc.rec.Checkpoints.Completed[n-1]
				tdd.RestoreCheckpointId, tdd.RestoreFrom = newest.Id, newest.Acks[0]
			}
			err := restoreDescriptor(tc.rec, damaged, tdd)
			switch {
			case tc.restore == 0 && len(damaged) > 0:
				if err == nil {
					t.Fatalf("a descriptor with no usable checkpoint: %v", tdd)
				}
			case err != nil:
				t.Fatal(err)
			case tdd.GetRestoreCheckpointId() != tc.restore || (tc.restore != 0 && tdd.GetRestoreFrom().GetStatePath() != stateOf(tc.restore, "sink")):
				t.Fatalf("descriptor restores %d from %s, want %d", tdd.GetRestoreCheckpointId(), tdd.GetRestoreFrom().GetStatePath(), tc.restore)
			}
		})
	}
}
