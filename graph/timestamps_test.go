package graph

import (
	"slices"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestAppendStateTimestampKeepsExactLists: appending keeps what appending then bounding kept
// (the first change and the latest ones), in a list of exactly its length, and stores the
// StateTimestamp given rather than a copy.
func TestAppendStateTimestampKeepsExactLists(t *testing.T) {
	ex, want := &pb.Execution{}, &pb.Execution{}
	for i := range 3 * MaxStateTimestamps {
		ts := &pb.StateTimestamp{State: pb.ExecutionState(1 + i%10), Timestamp: int64(1000 + i)}
		AppendStateTimestamp(ex, ts)
		want.StateTimestamps = append(want.StateTimestamps, ts)
		BoundStateTimestamps(want)
		if !slices.Equal(ex.StateTimestamps, want.StateTimestamps) {
			t.Fatalf("after %d appends: %v, want %v", i+1, ex.StateTimestamps, want.StateTimestamps)
		}
		if len(ex.StateTimestamps) != cap(ex.StateTimestamps) {
			t.Fatalf("after %d appends: length %d, capacity %d", i+1, len(ex.StateTimestamps), cap(ex.StateTimestamps))
		}
	}
	// A list longer than the bound (an earlier release's record) is cut as BoundStateTimestamps cuts it.
	long := &pb.Execution{}
	for i := range MaxStateTimestamps + 5 {
		long.StateTimestamps = append(long.StateTimestamps, &pb.StateTimestamp{Timestamp: int64(i)})
	}
	want.StateTimestamps = slices.Clone(long.StateTimestamps)
	last := &pb.StateTimestamp{Timestamp: 99}
	AppendStateTimestamp(long, last)
	want.StateTimestamps = append(want.StateTimestamps, last)
	BoundStateTimestamps(want)
	if !slices.Equal(long.StateTimestamps, want.StateTimestamps) || len(long.StateTimestamps) != MaxStateTimestamps {
		t.Fatalf("over the bound: %v, want %v", long.StateTimestamps, want.StateTimestamps)
	}
}
