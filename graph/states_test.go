package graph

import (
	"errors"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The expected tables are written out independently of the implementation's tables.
var wantExecution = map[string]string{
	"UNSPECIFIED":  "",
	"CREATED":      "SCHEDULED CANCELED FAILED RECONCILING",
	"SCHEDULED":    "DEPLOYING CANCELING CANCELED FAILED",
	"DEPLOYING":    "INITIALIZING RUNNING FINISHED CANCELING FAILED RECONCILING",
	"INITIALIZING": "RUNNING FINISHED CANCELING FAILED RECONCILING",
	"RUNNING":      "FINISHED CANCELING FAILED RECONCILING",
	"FINISHED":     "",
	"CANCELING":    "CANCELED FINISHED FAILED RECONCILING",
	"CANCELED":     "",
	"FAILED":       "",
	"RECONCILING":  "INITIALIZING RUNNING FINISHED CANCELED FAILED",
}

var wantJob = map[string]string{
	"UNSPECIFIED":  "",
	"INITIALIZING": "CREATED FAILED RECONCILING",
	"CREATED":      "RUNNING FAILING CANCELLING FAILED SUSPENDED RECONCILING",
	"RUNNING":      "FAILING FINISHED CANCELLING RESTARTING SUSPENDED RECONCILING",
	"FAILING":      "FAILED RESTARTING CANCELLING RECONCILING",
	"FAILED":       "",
	"CANCELLING":   "CANCELED FAILED RECONCILING",
	"CANCELED":     "",
	"FINISHED":     "",
	"RESTARTING":   "CREATED RUNNING CANCELLING FAILED SUSPENDED RECONCILING",
	"SUSPENDED":    "",
	"RECONCILING":  "RUNNING FAILING FINISHED CANCELLING",
}

func allowed(table map[string]string, from, to string) bool {
	for _, s := range strings.Fields(table[from]) {
		if s == to {
			return true
		}
	}
	return false
}

func TestExecutionTransitionsAllPairs(t *testing.T) {
	if len(wantExecution) != len(pb.ExecutionState_name) {
		t.Fatalf("expected table has %d states, enum has %d", len(wantExecution), len(pb.ExecutionState_name))
	}
	for f := range int32(len(pb.ExecutionState_name)) {
		for to := range int32(len(pb.ExecutionState_name)) {
			from, dst := pb.ExecutionState(f), pb.ExecutionState(to)
			want := allowed(wantExecution, ExecutionStateName(from), ExecutionStateName(dst))
			if got := CanTransitionExecution(from, dst); got != want {
				t.Errorf("CanTransitionExecution(%s, %s) = %v, want %v", ExecutionStateName(from), ExecutionStateName(dst), got, want)
			}
			err := CheckExecutionTransition(from, dst)
			if want != (err == nil) {
				t.Errorf("CheckExecutionTransition(%s, %s) = %v", ExecutionStateName(from), ExecutionStateName(dst), err)
			}
			if err != nil {
				if !errors.Is(err, ErrIllegalTransition) {
					t.Errorf("error %v does not wrap ErrIllegalTransition", err)
				}
				if !strings.Contains(err.Error(), ExecutionStateName(from)) || !strings.Contains(err.Error(), ExecutionStateName(dst)) {
					t.Errorf("error %q does not name both states", err)
				}
			}
		}
	}
}

func TestJobTransitionsAllPairs(t *testing.T) {
	if len(wantJob) != len(pb.JobStatus_name) {
		t.Fatalf("expected table has %d statuses, enum has %d", len(wantJob), len(pb.JobStatus_name))
	}
	for f := range int32(len(pb.JobStatus_name)) {
		for to := range int32(len(pb.JobStatus_name)) {
			from, dst := pb.JobStatus(f), pb.JobStatus(to)
			want := allowed(wantJob, JobStatusName(from), JobStatusName(dst))
			if got := CanTransitionJob(from, dst); got != want {
				t.Errorf("CanTransitionJob(%s, %s) = %v, want %v", JobStatusName(from), JobStatusName(dst), got, want)
			}
			err := CheckJobTransition(from, dst)
			if want != (err == nil) {
				t.Errorf("CheckJobTransition(%s, %s) = %v", JobStatusName(from), JobStatusName(dst), err)
			}
			if err != nil && !errors.Is(err, ErrIllegalTransition) {
				t.Errorf("error %v does not wrap ErrIllegalTransition", err)
			}
			if err != nil && (!strings.Contains(err.Error(), JobStatusName(from)) || !strings.Contains(err.Error(), JobStatusName(dst))) {
				t.Errorf("error %q does not name both statuses", err)
			}
		}
	}
}

func TestTerminalStates(t *testing.T) {
	for v, name := range pb.ExecutionState_name {
		s := pb.ExecutionState(v)
		want := name == "EXECUTION_STATE_FINISHED" || name == "EXECUTION_STATE_CANCELED" || name == "EXECUTION_STATE_FAILED"
		if IsTerminalExecution(s) != want {
			t.Errorf("IsTerminalExecution(%s) = %v", name, !want)
		}
		if want && wantExecution[ExecutionStateName(s)] != "" {
			t.Errorf("terminal %s has outgoing transitions", name)
		}
	}
	for v, name := range pb.JobStatus_name {
		s := pb.JobStatus(v)
		want := name == "JOB_STATUS_FINISHED" || name == "JOB_STATUS_CANCELED" || name == "JOB_STATUS_FAILED"
		if IsGloballyTerminal(s) != want {
			t.Errorf("IsGloballyTerminal(%s) = %v", name, !want)
		}
	}
}

func TestNamesAndParsers(t *testing.T) {
	if got := ExecutionStateName(pb.ExecutionState_EXECUTION_STATE_RUNNING); got != "RUNNING" {
		t.Errorf("ExecutionStateName = %q", got)
	}
	if got := JobStatusName(pb.JobStatus_JOB_STATUS_CANCELLING); got != "CANCELLING" {
		t.Errorf("JobStatusName = %q", got)
	}
	for v := range pb.ExecutionState_name {
		s := pb.ExecutionState(v)
		if s == pb.ExecutionState_EXECUTION_STATE_UNSPECIFIED {
			continue
		}
		for _, in := range []string{ExecutionStateName(s), strings.ToLower(ExecutionStateName(s)), s.String()} {
			got, err := ParseExecutionState(in)
			if err != nil || got != s {
				t.Errorf("ParseExecutionState(%q) = %v, %v", in, got, err)
			}
		}
	}
	for v := range pb.JobStatus_name {
		s := pb.JobStatus(v)
		if s == pb.JobStatus_JOB_STATUS_UNSPECIFIED {
			continue
		}
		for _, in := range []string{JobStatusName(s), strings.ToLower(JobStatusName(s)), s.String()} {
			got, err := ParseJobStatus(in)
			if err != nil || got != s {
				t.Errorf("ParseJobStatus(%q) = %v, %v", in, got, err)
			}
		}
	}
	for _, bad := range []string{"", "UNSPECIFIED", "runing", "EXECUTION_STATE_UNSPECIFIED"} {
		if _, err := ParseExecutionState(bad); !errors.Is(err, ErrUnknownState) {
			t.Errorf("ParseExecutionState(%q) err = %v", bad, err)
		}
		if _, err := ParseJobStatus(bad); !errors.Is(err, ErrUnknownState) {
			t.Errorf("ParseJobStatus(%q) err = %v", bad, err)
		}
	}
}
