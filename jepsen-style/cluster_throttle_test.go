package jepsen

import (
	"reflect"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/checker"
)

// TestParseStarveMarks: the starvation meter's lines, as jmnode writes them, become marks; other
// lines that mention starvation do not.
func TestParseStarveMarks(t *testing.T) {
	log := `2026-12-06T12:53:05.279Z [WARN]  jm3.jobmaster: this leader is starved of CPU; TaskManager liveness timers restart until it is not: late_share=0.527 window=1s epoch=1
2026-12-06T12:53:06.565Z [INFO]  jm3.jobmaster: this leader is no longer starved; TaskManager liveness timers count from now: starved_for=1.286s epoch=1
2026-12-06T12:53:06.900Z [WARN]  jm3.jobmaster: this leader is starved but its Raft node cannot hand leadership over: starved_for=3s epoch=1
2026-12-06T12:53:13.878Z [WARN]  jm3.jobmaster: this leader has been starved of CPU too long; handing leadership over: starved_for=3.1s late_share=0.85 epoch=1
2026-12-06T12:53:13.913Z [INFO]  jm3.jobmaster: this leader's term ended while it was starved: starved_for=3.2s epoch=1
2026-12-06T12:53:14.000Z [INFO]  jm3.jobmaster: leadership revoked: epoch=1`
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	want := []checker.StarveMark{
		{Node: "jm3", Time: at("2026-12-06T12:53:05.279Z"), Kind: checker.StarveBegins},
		{Node: "jm3", Time: at("2026-12-06T12:53:06.565Z"), Kind: checker.StarveRecovered},
		{Node: "jm3", Time: at("2026-12-06T12:53:13.878Z"), Kind: checker.StarveHandOver},
		{Node: "jm3", Time: at("2026-12-06T12:53:13.913Z"), Kind: checker.StarveTermEnded},
	}
	if got := parseStarveMarks("jm3", log); !reflect.DeepEqual(got, want) {
		t.Fatalf("marks\n%v\nwant\n%v", got, want)
	}
}
