package pipelinecheck

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writePart(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCommittedLines: committed parts are read, a part still .tmp is not, empty lines are left
// out, and each line carries its directory's name.
func TestCommittedLines(t *testing.T) {
	dir := t.TempDir()
	writePart(t, dir, "dl-j-0.jsonl.part-1", "a\n\nb\n")
	writePart(t, dir, "dl-j-1.jsonl.part-2", "c\n")
	writePart(t, dir, "dl-j-1.jsonl.part-3.tmp", "not committed\n")
	writePart(t, dir, "other-j-0.jsonl.part-1", "not matched\n")
	got, err := CommittedLines([]PartDir{{dir, "tm1"}}, "dl-j-*.jsonl.part-*")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"tm1: a", "tm1: b", "tm1: c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("CommittedLines = %q, want %q", got, want)
	}
}

// TestCommittedLinesAcrossTaskManagers: a region restored on another TaskManager commits its
// checkpoint's part again there (the same name, the same bytes): the committed output holds
// it once, the parts in name order across directories. A part of one name with other bytes
// is refused, naming both files.
func TestCommittedLinesAcrossTaskManagers(t *testing.T) {
	tm1, tm3 := t.TempDir(), t.TempDir()
	writePart(t, tm3, "dl-j-0.jsonl.part-0000000028", "a\n")
	writePart(t, tm3, "dl-j-0.jsonl.part-0000000029", "b\nc\n")
	writePart(t, tm1, "dl-j-0.jsonl.part-0000000029", "b\nc\n") // committed again after the restore
	writePart(t, tm1, "dl-j-0.jsonl.part-0000000030", "d\n")
	dirs := []PartDir{{tm1, "tm1"}, {tm3, "tm3"}}
	got, err := CommittedLines(dirs, "dl-j-*.jsonl.part-*")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"tm3: a", "tm1: b", "tm1: c", "tm1: d"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("CommittedLines = %q, want %q", got, want)
	}
	writePart(t, tm1, "dl-j-0.jsonl.part-0000000029", "b\nx\n")
	_, err = CommittedLines(dirs, "dl-j-*.jsonl.part-*")
	if err == nil || !strings.Contains(err.Error(), "dl-j-0.jsonl.part-0000000029 differs between") ||
		!strings.Contains(err.Error(), tm1) || !strings.Contains(err.Error(), tm3) {
		t.Fatalf("a part of other bytes: err = %v, want one naming the part and both files", err)
	}
}
