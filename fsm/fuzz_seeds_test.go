package fsm

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestWriteFuzzSeeds regenerates the seed corpora of the FSM's fuzz targets in testdata/fuzz
// when JMCLUSTER_WRITE_FUZZ_SEEDS=1: valid inputs (the script's entries, its snapshot) and the
// edge cases known from the unit tests.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("JMCLUSTER_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set JMCLUSTER_WRITE_FUZZ_SEEDS=1 to regenerate testdata/fuzz")
	}
	h := newHarness(t)
	h.f = New(nil)
	script(h)
	hostile := forwardJob(jobIDN(20), 4, 1024)
	for _, e := range hostile.Edges {
		e.Distribution = pb.Distribution_DISTRIBUTION_ALL_TO_ALL
	}
	hostileEntry, _ := Encode(submitT, &pb.SubmitJobCommand{JobGraph: hostile})
	bad := func(typ pb.CommandType, payload []byte) []byte { return envelope(typ, payload) }

	apply := map[string][]byte{"script": formatEntries(t, h.entries)}
	for i, e := range h.entries {
		apply[fmt.Sprintf("entry-%02d", i)] = formatEntries(t, [][]byte{e})
	}
	apply["hostile-chain"] = formatEntries(t, [][]byte{hostileEntry})
	apply["undecodable-payloads"] = formatEntries(t, [][]byte{bad(submitT, []byte{0x0a, 0x05, 0x01}), bad(updateT, []byte{0xff})})
	apply["empty"] = nil
	writeSeeds(t, "FuzzApply", apply)

	decode := map[string][]byte{
		"garbage":          {0xff, 0xff, 0xff, 0xff},
		"empty":            nil,
		"future-version":   mustMarshal(t, &pb.Command{Version: 2, Type: noopT}),
		"unknown-type":     mustMarshal(t, &pb.Command{Version: 1, Type: pb.CommandType(999)}),
		"unknown-ignored":  mustMarshal(t, &pb.Command{Version: 1, Type: pb.CommandType(999), Ignorable: true, Payload: []byte("x")}),
		"unspecified-type": mustMarshal(t, &pb.Command{Version: 1}),
		"bad-payload":      bad(submitT, []byte{0x0a, 0x05, 0x01}),
		"hostile-chain":    hostileEntry,
	}
	for i, e := range h.entries {
		decode[fmt.Sprintf("entry-%02d", i)] = e
	}
	writeSeeds(t, "FuzzDecodeCommand", decode)

	snap := persist(t, h.f)
	var bounds []int // the end of each record
	for at := 0; at < len(snap); {
		n, k := binary.Uvarint(snap[at:])
		at += k + int(n)
		bounds = append(bounds, at)
	}
	restoreSeeds := map[string][]byte{
		"script":       snap,
		"empty-state":  persist(t, New(nil)),
		"truncated":    snap[:len(snap)/2],
		"huge-length":  append([]byte{0xff, 0xff, 0xff, 0xff, 0x7f}, snap...),
		"trailing":     append(slices.Clone(snap), 0),
		"garbage":      []byte("not a snapshot at all"),
		"header-only":  snap[:bounds[0]],
		"no-header":    snap[bounds[0]:],
		"no-epoch":     snap[:bounds[len(bounds)-2]],
		"claims-200mb": binary.AppendUvarint(nil, 200<<20),
		// Found by reasoning about FuzzRestore's index property: Restore accepted one attempt
		// current on two subtasks of the same job.
		"attempt-current-twice": attemptTwiceInOneJob(t, h.f),
	}
	writeSeeds(t, "FuzzRestore", restoreSeeds)
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeSeeds writes one corpus file per seed, in the format `go test -fuzz` reads.
func writeSeeds(t *testing.T, target string, seeds map[string][]byte) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range seeds {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if err := os.WriteFile(filepath.Join(dir, "seed-"+name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
