package checker

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/jmcluster/jmcluster/jepsen-style/history"
)

// JobState is the model of one job id: whether the job exists and whether a cancel took effect.
type JobState struct {
	Exists    bool
	Cancelled bool
}

// jobInput is an operation of the model.
type jobInput struct {
	F     history.F
	JobID string
}

// jobOutput is what the operation observed. Info marks an indeterminate write; such writes
// are given a return time after every other operation, so they may take effect at any point
// after their invocation, or never.
type jobOutput struct {
	Type      history.Type
	Found     bool   // read: the job was found
	Cancelled bool   // read/cancel: the status is CANCELLING or CANCELED
	NotFound  bool   // cancel failed with NOT_FOUND
	Status    string // for the visualization
}

// CancelledStatus reports whether a job status shows that a cancel took effect.
func CancelledStatus(status string) bool {
	return status == "JOB_STATUS_CANCELLING" || status == "JOB_STATUS_CANCELED"
}

// JobModel is the porcupine model of the job API, partitioned by job id.
//
//   - submit ok or info: the job exists afterwards; submit fail: nothing changes.
//   - cancel ok: the job must exist; a CANCELLING/CANCELED answer marks it cancelled, another
//     answer (the job already ended) changes nothing. cancel fail NOT_FOUND: the job must not
//     exist; any other definite failure changes nothing. cancel info: cancelled if it exists.
//   - read ok: found must equal exists, and when found, cancelled must match.
//
// Indeterminate reads never reach the model (they have no effect and observed nothing).
func JobModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byID := map[string][]porcupine.Operation{}
			for _, op := range h {
				id := op.Input.(jobInput).JobID
				byID[id] = append(byID[id], op)
			}
			var out [][]porcupine.Operation
			for _, id := range sortedStrings(byID) {
				out = append(out, byID[id])
			}
			return out
		},
		Init: func() any { return JobState{} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(JobState), input.(jobInput), output.(jobOutput)
			switch in.F {
			case history.Submit:
				if out.Type == history.Fail {
					return true, s
				}
				return true, JobState{Exists: true, Cancelled: s.Cancelled}
			case history.Cancel:
				switch {
				case out.Type == history.Info:
					if s.Exists {
						s.Cancelled = true
					}
					return true, s
				case out.Type == history.Fail && out.NotFound:
					return !s.Exists, s
				case out.Type == history.Fail:
					return true, s
				default:
					if !s.Exists {
						return false, s
					}
					if out.Cancelled {
						s.Cancelled = true
					}
					return true, s
				}
			case history.Read:
				if !out.Found {
					return !s.Exists, s
				}
				return s.Exists && s.Cancelled == out.Cancelled, s
			}
			return false, s
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(jobInput), output.(jobOutput)
			switch {
			case out.Type != history.OK:
				return fmt.Sprintf("%s(%s) -> %s %s", in.F, short(in.JobID), out.Type, out.Status)
			case in.F == history.Read && !out.Found:
				return fmt.Sprintf("read(%s) -> not found", short(in.JobID))
			default:
				return fmt.Sprintf("%s(%s) -> %s", in.F, short(in.JobID), out.Status)
			}
		},
		DescribeState: func(state any) string {
			s := state.(JobState)
			return fmt.Sprintf("exists=%v cancelled=%v", s.Exists, s.Cancelled)
		},
	}
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// Operations converts paired calls into porcupine operations: indeterminate reads are dropped
// and indeterminate writes return after everything else.
func Operations(calls []history.Call) []porcupine.Operation {
	var end int64
	for _, c := range calls {
		if c.Complete > end {
			end = c.Complete
		}
	}
	var ops []porcupine.Operation
	for _, c := range calls {
		out := jobOutput{Type: c.Type}
		if c.Value != nil {
			out.Found = c.Value.Found
			out.Status = c.Value.Status
			out.Cancelled = CancelledStatus(c.Value.Status)
			out.NotFound = c.Value.Code == "NotFound"
		}
		ret := c.Complete
		if c.Type == history.Info {
			if c.F == history.Read {
				continue
			}
			ret = end + 1
		}
		ops = append(ops, porcupine.Operation{ClientId: c.Process, Input: jobInput{F: c.F, JobID: c.JobID},
			Call: c.Invoke, Output: out, Return: ret})
	}
	return ops
}

// Linearizable checks the job API history with porcupine. When the history is not
// linearizable the returned info can be rendered with porcupine.VisualizePath(JobModel(), ...).
func Linearizable(calls []history.Call, timeout time.Duration) (Result, porcupine.LinearizationInfo) {
	r := newResult("linearizable")
	ops := Operations(calls)
	for _, c := range calls {
		r.Counts[string(c.F)+"-"+string(c.Type)]++
	}
	r.Counts["operations"] = len(ops)
	res, info := porcupine.CheckOperationsVerbose(JobModel(), ops, timeout)
	switch res {
	case porcupine.Ok:
		r.Summary = fmt.Sprintf("%d operations linearizable", len(ops))
	case porcupine.Illegal:
		r.problem("history is not linearizable (see linearizability.html)")
		r.Summary = "not linearizable"
	default:
		r.Verdict = Fail
		r.Summary = fmt.Sprintf("porcupine timed out after %s", timeout)
	}
	return *r, info
}
