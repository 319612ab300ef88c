// Package transport holds the gRPC edge of jmcluster: the protocol's status reasons, the
// policy table and the one interceptor every gRPC server runs, the message limits and the TLS
// credentials; the generated protobuf code is in pb/.
package transport

import (
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrorDomain is the ErrorInfo domain of every status jmcluster attaches a reason to.
const ErrorDomain = "jmcluster.io"

// Reasons carried in the ErrorInfo detail of a status. They are part of the protocol: TMs and
// clients branch on them. See docs/protocol.md.
const (
	// ReasonReconciling: the leader is reconciling and its RPC gate is closed (UNAVAILABLE,
	// with a RetryInfo detail). Keep the message and retry after the given delay.
	ReasonReconciling = "RECONCILING"
	// ReasonStaleEpoch: the caller's leader epoch is lower than one the callee has seen
	// (FAILED_PRECONDITION). The caller is a deposed leader and must stop acting.
	ReasonStaleEpoch = "STALE_EPOCH"
	// ReasonNotLeader: the node is not the leader (UNAVAILABLE); metadata "leader" names the
	// leader's gRPC address when known.
	ReasonNotLeader = "NOT_LEADER"
	// ReasonNoLeader: no leader is known within the hold time (UNAVAILABLE).
	ReasonNoLeader = "NO_LEADER"
	// ReasonUnknownTaskManager: the leader does not know the TM; it must register again.
	ReasonUnknownTaskManager = "UNKNOWN_TASK_MANAGER"
	// ReasonUnannouncedEpoch: a TM was called with a leader epoch above the one it has seen, on
	// a call other than RequestReport, and no JobMaster names that epoch as the established
	// leader's (FAILED_PRECONDITION). Nothing happened; the caller is not deposed: a new
	// leader announces its epoch with RequestReport first.
	ReasonUnannouncedEpoch = "UNANNOUNCED_EPOCH"
	// ReasonMessageTooLarge: a request or reply is over a message size limit
	// (RESOURCE_EXHAUSTED); metadata "limit", "size" (when known), "message" (request or
	// reply) and "setting" (--max-message-size). Final: the same message is refused again.
	ReasonMessageTooLarge = "MESSAGE_TOO_LARGE"
	// ReasonRateLimited: the client is over its write rate limit on the JobMaster it called
	// (RESOURCE_EXHAUSTED, with a RetryInfo detail); metadata "client", "rate", "burst".
	// Nothing was proposed; retry after the given delay.
	ReasonRateLimited = "RATE_LIMITED"
)

// ReconcilingError is the status refused RPCs get while the gate is closed.
func ReconcilingError(retryAfter time.Duration) error {
	st := status.New(codes.Unavailable, "leader is reconciling; retry after "+retryAfter.String())
	st, _ = st.WithDetails(
		&errdetails.ErrorInfo{Reason: ReasonReconciling, Domain: ErrorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)},
	)
	return st.Err()
}

// RateLimitedError is the refusal of a write from a client over its rate limit: msg names the
// limit, md describes it, retryAfter is when the client's next write will be admitted.
func RateLimitedError(msg string, md map[string]string, retryAfter time.Duration) error {
	st := status.New(codes.ResourceExhausted, msg)
	st, _ = st.WithDetails(
		&errdetails.ErrorInfo{Reason: ReasonRateLimited, Domain: ErrorDomain, Metadata: md},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)},
	)
	return st.Err()
}

// StaleEpochError is the status a TM returns to a caller with an older leader epoch.
func StaleEpochError(got, seen uint64) error {
	st := status.Newf(codes.FailedPrecondition, "stale leader epoch %d: epoch %d has been seen", got, seen)
	st, _ = st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonStaleEpoch, Domain: ErrorDomain,
		Metadata: map[string]string{"seen": strconv.FormatUint(seen, 10)}})
	return st.Err()
}

// UnannouncedEpochError is the status a TM returns to a call whose higher epoch it has not
// seen announced.
func UnannouncedEpochError(got, seen uint64) error {
	st := status.Newf(codes.FailedPrecondition,
		"leader epoch %d is above the %d this TaskManager has seen and no JobMaster names it; a new leader announces its epoch with RequestReport first", got, seen)
	st, _ = st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonUnannouncedEpoch, Domain: ErrorDomain})
	return st.Err()
}

// NotLeaderError says this node is not the leader; leaderAddr may be empty.
func NotLeaderError(leaderAddr string) error {
	st := status.New(codes.Unavailable, "not the leader")
	info := &errdetails.ErrorInfo{Reason: ReasonNotLeader, Domain: ErrorDomain}
	if leaderAddr != "" {
		info.Metadata = map[string]string{"leader": leaderAddr}
		st = status.New(codes.Unavailable, "not the leader; leader is at "+leaderAddr)
	}
	st, _ = st.WithDetails(info)
	return st.Err()
}

// WithReason builds a status with the given code, message and ErrorInfo reason.
func WithReason(code codes.Code, reason, msg string) error {
	st := status.New(code, msg)
	st, _ = st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain})
	return st.Err()
}

// Reason returns the ErrorInfo reason of a gRPC error, or "".
func Reason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Reason
		}
	}
	return ""
}

// RetryAfter returns the RetryInfo delay of a gRPC error, if it has one.
func RetryAfter(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.RetryDelay != nil {
			return ri.RetryDelay.AsDuration(), true
		}
	}
	return 0, false
}

// LeaderHint returns the leader address carried by a NOT_LEADER status, or "".
func LeaderHint(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Reason == ReasonNotLeader {
			return info.Metadata["leader"]
		}
	}
	return ""
}

// IsReconciling reports whether err is the gate's refusal.
func IsReconciling(err error) bool { return Reason(err) == ReasonReconciling }

// IsRateLimited reports whether err is a refusal of a client over its write rate limit.
func IsRateLimited(err error) bool { return Reason(err) == ReasonRateLimited }

// IsStaleEpoch reports whether err is a TM's refusal of an older epoch.
func IsStaleEpoch(err error) bool { return Reason(err) == ReasonStaleEpoch }

// StaleEpochSeen returns the epoch a STALE_EPOCH refusal says the TaskManager has seen.
func StaleEpochSeen(err error) (uint64, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Reason == ReasonStaleEpoch {
			seen, err := strconv.ParseUint(info.Metadata["seen"], 10, 64)
			return seen, err == nil
		}
	}
	return 0, false
}

// Retryable reports whether a TM -> JM message refused with err should stay in the outbox and
// be retried: the gate is closed, the node is not (or no longer) the leader, or the network
// failed. Validation errors (InvalidArgument, NotFound, FailedPrecondition) and a message over
// a size limit (MESSAGE_TOO_LARGE: the same message would be refused again) are final.
func Retryable(err error) bool {
	if err == nil || IsMessageTooLarge(err) {
		return false
	}
	st, ok := status.FromError(err)
	if !ok {
		return true // a transport or context error: the message never reached a leader
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted, codes.Canceled, codes.Unknown:
		return true
	}
	return false
}
