package pipelinecheck

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestCommittedLines: committed parts are read, a part still .tmp is not, empty lines are left
// out, and each line carries the prefix.
func TestCommittedLines(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("dl-j-0.jsonl.part-1", "a\n\nb\n")
	write("dl-j-1.jsonl.part-2", "c\n")
	write("dl-j-1.jsonl.part-3.tmp", "not committed\n")
	write("other-j-0.jsonl.part-1", "not matched\n")
	got, err := CommittedLines(filepath.Join(dir, "dl-j-*.jsonl.part-*"), "tm1: ")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"tm1: a", "tm1: b", "tm1: c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("CommittedLines = %q, want %q", got, want)
	}
}
