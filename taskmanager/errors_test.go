package taskmanager

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/transport"
)

// TestErrorTableCoversSentinels: every sentinel errors.go declares (a package-level Err...
// variable) has a row in the table, and no row names one twice.
func TestErrorTableCoversSentinels(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[error]int{}
	for _, r := range errorTable {
		rows[r.err]++
	}
	sentinels := map[string]error{
		"ErrNoLeader": ErrNoLeader, "ErrStaleLeader": ErrStaleLeader, "ErrInvalidTask": ErrInvalidTask,
		"ErrPartitionReleased": ErrPartitionReleased, "ErrStopped": ErrStopped, "ErrInvalidRequest": ErrInvalidRequest,
		"ErrUnknownAttempt": ErrUnknownAttempt, "ErrCancelledUnseen": ErrCancelledUnseen,
		"ErrNoCheckpointStorage": ErrNoCheckpointStorage, "ErrStaleAttempt": ErrStaleAttempt, "ErrSlotBusy": ErrSlotBusy, "ErrRecordTooLarge": ErrRecordTooLarge,
		"ErrStaleEpoch": ErrStaleEpoch, "ErrUnannouncedEpoch": ErrUnannouncedEpoch,
	}
	declared := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			for _, n := range s.(*ast.ValueSpec).Names {
				if len(n.Name) < 4 || n.Name[:3] != "Err" {
					continue
				}
				declared++
				e, known := sentinels[n.Name]
				if !known {
					t.Errorf("%s is declared in errors.go but not listed in this test", n.Name)
					continue
				}
				if rows[e] != 1 {
					t.Errorf("%s has %d rows in errorTable, want 1", n.Name, rows[e])
				}
			}
		}
	}
	if declared != len(sentinels) || len(errorTable) != len(sentinels) {
		t.Errorf("%d sentinels declared, %d listed here, %d table rows", declared, len(sentinels), len(errorTable))
	}
}

// TestStatusTable: what each TaskManager error becomes on the wire. Wrapped errors map as
// their sentinel; a kindError carries its own message only; epoch refusals carry their
// reasons and the messages transport builds.
func TestStatusTable(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("doing something: %w", err) }
	cases := []struct {
		name   string
		err    error
		code   codes.Code
		reason string
		msg    string // "" : not checked
	}{
		{"stale epoch", &EpochError{Kind: ErrStaleEpoch, Got: 3, Seen: 4}, codes.FailedPrecondition, transport.ReasonStaleEpoch, "stale leader epoch 3: epoch 4 has been seen"},
		{"unannounced epoch", &EpochError{Kind: ErrUnannouncedEpoch, Got: 5, Seen: 4}, codes.FailedPrecondition, transport.ReasonUnannouncedEpoch,
			"leader epoch 5 is above the 4 this TaskManager has seen and no JobMaster names it; a new leader announces its epoch with RequestReport first"},
		{"invalid request", invalidRequest(errors.New("cancel: job_id and attempt_id are required")), codes.InvalidArgument, "", "cancel: job_id and attempt_id are required"},
		{"invalid task", wrap(ErrInvalidTask), codes.InvalidArgument, "", ""},
		{"unknown attempt", errorf(ErrUnknownAttempt, "attempt %s is not on %s", "a1", "tm1"), codes.NotFound, "", "attempt a1 is not on tm1"},
		{"cancelled unseen", errorf(ErrCancelledUnseen, "cancelled"), codes.FailedPrecondition, "", "cancelled"},
		{"no checkpoint storage", errorf(ErrNoCheckpointStorage, "no storage"), codes.FailedPrecondition, "", "no storage"},
		{"stale attempt", errorf(ErrStaleAttempt, "stale attempt number 1"), codes.FailedPrecondition, "", "stale attempt number 1"},
		{"slot busy", errorf(ErrSlotBusy, "slot 0 of tm1 is busy"), codes.ResourceExhausted, "", "slot 0 of tm1 is busy"},
		{"stopped", ErrStopped, codes.Unavailable, "", "taskmanager stopped"},
		{"no leader", ErrNoLeader, codes.Unavailable, transport.ReasonNoLeader, ""},
		{"stale leader", wrap(ErrStaleLeader), codes.Unavailable, "", ""},
		{"partition released", wrap(ErrPartitionReleased), codes.Aborted, "", ""},
		{"context canceled", context.Canceled, codes.Canceled, "", ""},
		{"deadline", wrap(context.DeadlineExceeded), codes.DeadlineExceeded, "", ""},
		{"a status passes", status.Error(codes.Aborted, "already a status"), codes.Aborted, "", "already a status"},
		{"anything else", errors.New("anything else"), codes.Internal, "", "anything else"},
	}
	for _, c := range cases {
		got := Status(c.err)
		st := status.Convert(got)
		if st.Code() != c.code || transport.Reason(got) != c.reason || (c.msg != "" && st.Message() != c.msg) {
			t.Errorf("%s: Status(%v) = %v (reason %q), want %v (reason %q) %q", c.name, c.err, got, transport.Reason(got), c.code, c.reason, c.msg)
		}
	}
	if Status(nil) != nil || codeOf(nil) != codes.OK {
		t.Error("Status(nil) is not nil")
	}
	// The epoch refusals are exactly transport's (their text is the protocol's).
	if got, want := Status(&EpochError{Kind: ErrStaleEpoch, Got: 3, Seen: 4}).Error(), transport.StaleEpochError(3, 4).Error(); got != want {
		t.Errorf("stale epoch status %q, transport builds %q", got, want)
	}
	if got, want := Status(&EpochError{Kind: ErrUnannouncedEpoch, Got: 5, Seen: 4}).Error(), transport.UnannouncedEpochError(5, 4).Error(); got != want {
		t.Errorf("unannounced epoch status %q, transport builds %q", got, want)
	}
}
