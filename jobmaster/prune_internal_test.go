package jobmaster

import (
	"reflect"
	"testing"
)

// TestEmptiedReplacesOnlyEmptyMaps: prune replaces a term map that its deletions emptied (its
// buckets would stay allocated), and keeps one with entries.
func TestEmptiedReplacesOnlyEmptyMaps(t *testing.T) {
	m := map[string]bool{}
	for i := range 10_000 {
		m[string(rune('a'+i%26))+string(rune(i))] = true
	}
	ptr := func(m map[string]bool) uintptr { return reflect.ValueOf(m).Pointer() }
	if got := emptied(m); ptr(got) != ptr(m) {
		t.Fatal("a map with entries was replaced")
	}
	for k := range m {
		delete(m, k)
	}
	got := emptied(m)
	if ptr(got) == ptr(m) || got == nil || len(got) != 0 {
		t.Fatalf("an emptied map was kept (or not replaced by an empty one): %v", got == nil)
	}
}
