package nemesis

import (
	"errors"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestRaftChangeNamesWhatAJobMasterReads: a changed entry header, data, extensions or key, a
// lost entry, a changed stable value and a file that no longer reads are changes; an entry's
// append time (no JobMaster reads it as state) is not.
func TestRaftChangeNamesWhatAJobMasterReads(t *testing.T) {
	state := func(edit func(*raftState)) raftState {
		st := raftState{keys: []uint64{5, 6}, conf: map[string][]byte{"CurrentTerm": {0, 4}}}
		for _, k := range st.keys {
			st.entries = append(st.entries, raft.Log{Index: k, Term: 2, Type: raft.LogCommand, Data: []byte("abc"),
				Extensions: []byte("sum"), AppendedAt: time.Unix(1, 0)})
		}
		if edit != nil {
			edit(&st)
		}
		return st
	}
	before := state(nil)
	for _, c := range []struct {
		edit func(*raftState)
		err  error
		want string
	}{
		{nil, nil, ""},
		{func(s *raftState) { s.entries[1].AppendedAt = time.Unix(99, 0) }, nil, ""},
		{func(s *raftState) { s.entries[1].Data = []byte("abd") }, nil, "log entry 6's data"},
		{func(s *raftState) { s.entries[0].Term = 3 }, nil, "log entry 5's header"},
		{func(s *raftState) { s.entries[0].Extensions = []byte("sun") }, nil, "log entry 5's extensions"},
		{func(s *raftState) { s.keys[1] = 7 }, nil, "log entry 6 is stored under index 7"},
		{func(s *raftState) { s.keys, s.entries = s.keys[:1], s.entries[:1] }, nil, "1 entries instead of 2"},
		{func(s *raftState) { s.conf["CurrentTerm"] = []byte{0, 5} }, nil, `stable-store value "CurrentTerm"`},
		{nil, errors.New("reading it crashed: fault"), "no longer reads: reading it crashed"},
	} {
		got := raftChange(before, state(c.edit), c.err)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("want %q, got %q", c.want, got)
		}
	}
}

// TestDamageDrawsAgainUntilItChangesWhatIsRead: a damage that changes nothing read is drawn
// again from the pristine file; one that never does is reported as such, the file damaged once.
func TestDamageDrawsAgainUntilItChangesWhatIsRead(t *testing.T) {
	path := boltFile(t)
	pristine, _ := os.ReadFile(path)
	spans, err := liveBoltSpans(path)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	what, change, err := damageChanging(path, BitFlip, spans, rand.New(rand.NewSource(7)), func() (string, error) {
		calls++
		if calls < 3 {
			return "", nil
		}
		return "log entry 9's data", nil
	})
	if err != nil || calls != 3 || change != "log entry 9's data" || !strings.HasPrefix(what, "bit ") {
		t.Fatalf("calls %d, %q, %q, %v", calls, what, change, err)
	}
	if err := os.WriteFile(path, pristine, 0o600); err != nil {
		t.Fatal(err)
	}
	calls = 0
	what, change, err = damageChanging(path, BitFlip, spans, rand.New(rand.NewSource(7)), func() (string, error) { calls++; return "", nil })
	after, _ := os.ReadFile(path)
	diff := 0
	for i := range after {
		if after[i] != pristine[i] {
			diff++
		}
	}
	if err != nil || calls != maxDraws || change != "" || !strings.Contains(what, "no draw of 16") || diff != 1 {
		t.Fatalf("calls %d, %q, %q, %v, %d bytes differ", calls, what, change, err, diff)
	}
}
