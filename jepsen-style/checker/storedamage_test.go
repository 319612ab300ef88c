package checker

import (
	"strings"
	"testing"
)

// TestStoreDamage: refusals naming the file and replicas that ran on a damage that changed
// nothing they read pass; a replica that ran on a changed entry, or exited without naming its
// damage, fails; no store fault skips.
func TestStoreDamage(t *testing.T) {
	if r := StoreDamage(nil); r.Verdict != Skipped {
		t.Fatalf("no store fault: %+v", r)
	}
	ok := []Damage{
		{Fault: 0, Node: "jm2", File: "/d/raft.db", Mode: "bit-flip", Outcome: "refused", Said: "jmnode: cluster: /d/raft.db is damaged: ..."},
		{Fault: 1, Node: "jm1", File: "/d/raft.db", Mode: "bit-flip", Outcome: "started"}, // it changed nothing read
		{Fault: 2, Node: "jm3", Mode: "copy-chunk", Outcome: "skipped"},
	}
	if r := StoreDamage(ok); r.Verdict != Pass || r.Counts["refused"] != 1 || r.Counts["started"] != 1 {
		t.Fatalf("clean: %+v", r)
	}
	unverified := append(ok, Damage{Fault: 3, Node: "jm1", File: "/d/raft.db", Mode: "bit-flip", Damage: "bit 6 of byte 78253 flipped",
		Changed: "log entry 57's data", Outcome: "started"})
	r := StoreDamage(unverified)
	if r.Verdict != Fail || len(r.Problems) != 1 || !strings.Contains(r.Problems[0], "jm1 ran on its damaged /d/raft.db") ||
		!strings.Contains(r.Problems[0], "log entry 57's data") {
		t.Fatalf("ran on a changed entry: %+v", r)
	}
	bad := append(ok, Damage{Fault: 3, Node: "jm1", File: "/d/raft.db", Mode: "truncate", Outcome: "crashed", Said: "unexpected fault address 0x7f\nfatal error: fault"})
	r = StoreDamage(bad)
	if r.Verdict != Fail || len(r.Problems) != 1 || !strings.Contains(r.Problems[0], "jm1 exited on its damaged /d/raft.db") {
		t.Fatalf("a crash: %+v", r)
	}
}
