package taskmanager

import (
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/transport"
)

// The calls to the leader whose refusals are tracked (Refusal.Call, the metric's call label).
const (
	CallRegister  = "register"
	CallHeartbeat = "heartbeat"
	CallReport    = "report" // UpdateTaskExecutionState and the other outbox messages
)

// Refusal is the leader's answer refusing a call of this TaskManager for a reason other than
// "no leader yet": a setting the leader will not accept (slots, protocol), an incarnation
// replaced, a report it will never record. It is kept as the TM's current refusal until the
// same call succeeds.
type Refusal struct {
	Call    string    // CallRegister, CallHeartbeat or CallReport
	Code    string    // the gRPC status code ("InvalidArgument", ...)
	Message string    // the leader's message
	Leader  string    // the leader's address
	At      time.Time // when it was last answered so
}

// RefusalCount is how many refusals of one call with one code this TM got (the metric).
type RefusalCount struct {
	Call, Code string
	Count      int64
}

// refusalOf classifies a failed call to the leader: the status code of a refusal, or false for
// "no leader yet" and for the network — no status (the call never reached a leader), the leader
// unavailable or not answering in time (UNAVAILABLE: no leader known, NOT_LEADER with or
// without a hint, RECONCILING; DEADLINE_EXCEEDED, CANCELED), a deposed leader's STALE_EPOCH and
// a leader's rate limit (RESOURCE_EXHAUSTED with RATE_LIMITED, retried after its delay). Those
// end by themselves; a refusal does not: it repeats until an operator acts.
func refusalOf(err error) (string, bool) {
	st, ok := status.FromError(err)
	if err == nil || !ok {
		return "", false
	}
	switch st.Code() {
	case codes.OK, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return "", false
	}
	switch transport.Reason(err) {
	case transport.ReasonNotLeader, transport.ReasonNoLeader, transport.ReasonReconciling, transport.ReasonStaleEpoch, transport.ReasonRateLimited:
		return "", false
	}
	return st.Code().String(), true
}

// noteAnswer records the leader's answer to a call: a success clears the call's current
// refusal; a refusal (refusalOf) is counted, kept as the current refusal and, when its answer
// differs from the last one logged for the call, logged at ERROR (a TM retries a refused
// registration every heartbeat interval: one line, not one per retry). quiet leaves the log to
// the caller (the outbox logs each refused message itself). It reports whether err was a
// refusal.
func (l *leaderLink) noteAnswer(call, leader string, err error, quiet bool) bool {
	if err == nil {
		l.mu.Lock()
		if l.refusal != nil && l.refusal.Call == call {
			l.refusal = nil
		}
		l.mu.Unlock()
		return false
	}
	code, ok := refusalOf(err)
	if !ok {
		return false
	}
	msg := status.Convert(err).Message()
	l.mu.Lock()
	if l.refusalCounts == nil {
		l.refusalCounts = map[[2]string]int64{}
	}
	l.refusalCounts[[2]string{call, code}]++
	l.refusal = &Refusal{Call: call, Code: code, Message: msg, Leader: leader, At: time.Now()}
	if l.refusedWith == nil {
		l.refusedWith = map[string]string{}
	}
	answer := code + ": " + msg
	first := l.refusedWith[call] != answer
	l.refusedWith[call] = answer
	l.mu.Unlock()
	if first && !quiet {
		l.log.Error("the leader refuses this TaskManager: it gets no work until the cause is fixed", "call", call, "leader", leader, "code", code, "error", msg)
	}
	return true
}

// currentRefusal returns the leader's last refusal of a call that has not succeeded since, or
// nil.
func (l *leaderLink) currentRefusal() *Refusal {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refusal == nil {
		return nil
	}
	r := *l.refusal
	return &r
}

// refusals counts the leader's refusals of this TM's calls, by call and code, sorted.
func (l *leaderLink) refusals() []RefusalCount {
	l.mu.Lock()
	out := make([]RefusalCount, 0, len(l.refusalCounts))
	for k, n := range l.refusalCounts {
		out = append(out, RefusalCount{Call: k[0], Code: k[1], Count: n})
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Call != out[j].Call {
			return out[i].Call < out[j].Call
		}
		return out[i].Code < out[j].Code
	})
	return out
}
