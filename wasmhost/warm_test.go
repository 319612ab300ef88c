package wasmhost_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/wasmbuild"
	"github.com/jmcluster/jmcluster/wasmhost"
)

// waitWarm polls until h has a warm instance of module name waiting.
func waitWarm(t *testing.T, h *wasmhost.Host, name string) {
	t.Helper()
	sha := wasmhost.Sum(modules[name])
	deadline := time.Now().Add(2 * time.Minute) // a start under -race on loaded cores
	for h.WarmWaiting(sha) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no warm instance of %s waiting after 2 minutes (waiting: %d)", name, h.WarmWaiting(sha))
		}
		<-time.After(time.Millisecond)
	}
}

// TestWarmInstanceSameAsCold: once a task's instance is started (its Init returned), the host
// starts another in the background and the next task takes it; a warm instance and a cold one of the same task
// label give the same outputs for the same records, the randomness included (the module's
// start draws from the module's own seed in both, the task's calls from the task's stream).
func TestWarmInstanceSameAsCold(t *testing.T) {
	h := wasmhost.NewWithCacheDir(wasmbuild.CacheDir())
	t.Cleanup(func() { _ = h.Close() })
	first := instance(t, h, "kinds", wasmhost.Config{Label: "job/v/0"})
	if first.Warm() {
		t.Fatal("the first instance of a host was warm")
	}
	run := func(in *wasmhost.Instance) []string {
		if err := in.Init([]byte(`{"suffix":"!"}`)); err != nil {
			t.Fatal(err)
		}
		var outs []string
		for _, fn := range []string{"upper", "dup", "probe", "probe", "first"} {
			got, err := call(t, in, fn, rec{"a", "x+y", 1}, rec{"b", "", 2})
			outs = append(outs, fmt.Sprint(fn, got, err))
		}
		return outs
	}
	if n := h.WarmWaiting(wasmhost.Sum(modules["kinds"])); n != 0 {
		t.Fatalf("%d warm instances waiting before the first task's start was over", n)
	}
	if err := first.Init(nil); err != nil { // the start is over: the next one is made now
		t.Fatal(err)
	}
	waitWarm(t, h, "kinds")
	warm := instance(t, h, "kinds", wasmhost.Config{Label: "job/v/1"})
	if !warm.Warm() {
		t.Fatal("a warm instance was waiting, and the task's instance was not it")
	}
	h.SetWarm(false)
	if n := h.WarmWaiting(wasmhost.Sum(modules["kinds"])); n != 0 {
		t.Errorf("%d warm instances waiting after SetWarm(false)", n)
	}
	cold := instance(t, h, "kinds", wasmhost.Config{Label: "job/v/1"})
	if cold.Warm() {
		t.Fatal("an instance made with warm instances off was warm")
	}
	w, c, other := run(warm), run(cold), run(first)
	for i := range w {
		if w[i] != c[i] {
			t.Errorf("warm: %s\ncold: %s", w[i], c[i])
		}
	}
	if w[2] == other[2] {
		t.Errorf("two task labels drew the same randomness: %s", w[2])
	}
	t.Logf("warm %s", w[2])
}
