package wasmhost_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/testkit/wasmbuild"
	"github.com/jmcluster/jmcluster/wasmhost"
)

var modules map[string][]byte

func TestMain(m *testing.M) {
	wasmhost.SetCacheDir(wasmbuild.CacheDir())
	modules = wasmbuild.MustRead("kinds", "wordsplit", "loop", "alloc", "boom", "importer")
	os.Exit(m.Run())
}

// logs is a logger whose lines a test reads.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.buf.Write(p) }
func (l *logs) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.buf.String() }

func instance(t *testing.T, h *wasmhost.Host, name string, cfg wasmhost.Config) *wasmhost.Instance {
	t.Helper()
	b := modules[name]
	in, err := h.Instantiate(t.Context(), wasmhost.Sum(b), b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close() })
	return in
}

type rec struct {
	key, value string
	time       int64
}

// call runs function fn over rs and returns the outputs as "src:key=value@time" with the
// kept fields of the input.
func call(t *testing.T, in *wasmhost.Instance, fn string, rs ...rec) ([]string, error) {
	t.Helper()
	var b wasmhost.Batch
	for _, r := range rs {
		b.Add([]byte(r.key), []byte(r.value), r.time)
	}
	out, err := in.Call(fn, &b, nil)
	if err != nil {
		return nil, err
	}
	var got []string
	err = wasmhost.Decode(out, len(rs), func(o wasmhost.Out) error {
		k, v, tm := string(o.Key), string(o.Value), o.Time
		if o.Flags&wasmhost.SameKey != 0 {
			k = rs[o.Src].key
		}
		if o.Flags&wasmhost.SameValue != 0 {
			v = rs[o.Src].value
		}
		if o.Flags&wasmhost.SameTime != 0 {
			tm = rs[o.Src].time
		}
		got = append(got, fmt.Sprintf("%d:%s=%s@%d", o.Src, k, v, tm))
		return nil
	})
	return got, err
}

func TestMapFlatMapFilterKeyByInBatches(t *testing.T) {
	in := instance(t, wasmhost.Default(), "kinds", wasmhost.Config{Label: "t"})
	if err := in.Init([]byte(`{"suffix":"!"}`)); err != nil {
		t.Fatal(err)
	}
	rs := []rec{{"a", "hello", 1}, {"b", "go+", 2}, {"", "", 3}}
	for _, tc := range []struct {
		fn   string
		want string
	}{
		{"upper", "[0:a=HELLO!@1 1:b=GO+!@2 2:=!@3]"},
		{"dup", "[0:a=hello@1 0:a=hello@1 1:b=go+@2 1:b=go+@2 1:b=+@2 2:=@3 2:=@3]"},
		{"even", "[2:=@3]"},
		{"first", "[0:h=hello@1 1:g=go+@2 2:=@3]"},
	} {
		got, err := call(t, in, tc.fn, rs...)
		if err != nil {
			t.Fatalf("%s: %v", tc.fn, err)
		}
		if fmt.Sprint(got) != tc.want {
			t.Errorf("%s: got %v, want %s", tc.fn, got, tc.want)
		}
	}
	if s := in.Stats(); s.Calls != 5 || s.RecordsIn != 12 {
		t.Errorf("stats %+v: want 5 calls (init and 4), 12 records in", s)
	}
}

func TestWordSplitExample(t *testing.T) {
	in := instance(t, wasmhost.Default(), "wordsplit", wasmhost.Config{Label: "t"})
	if err := in.Init([]byte(`{"lower":true,"min_length":2}`)); err != nil {
		t.Fatal(err)
	}
	got, err := call(t, in, "split", rec{"k", "The cat, the HAT; a dog", 7})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[0:the=the@7 0:cat=cat@7 0:the=the@7 0:hat=hat@7 0:dog=dog@7]"; fmt.Sprint(got) != want {
		t.Errorf("got %v, want %s", got, want)
	}
}

// TestSandbox: the module sees no file, directory, socket, environment or arguments; its clock
// is the host's (starting at the Unix epoch) and its randomness is fixed per task label.
func TestSandbox(t *testing.T) {
	h := wasmhost.Default()
	probe := func(label string) string {
		in := instance(t, h, "kinds", wasmhost.Config{Label: label})
		got, err := call(t, in, "probe", rec{"k", "", 0})
		if err != nil {
			t.Fatal(err)
		}
		return got[0]
	}
	a, b, c := probe("job/v/0"), probe("job/v/0"), probe("job/v/1")
	if !strings.Contains(a, "file=true dir=true net=true env=0 args=0 year=1970") {
		t.Errorf("the module saw: %s", a)
	}
	if a != b || a == c {
		t.Errorf("randomness: the same label gives %q and %q; another label %q", a, b, c)
	}
}

func TestRefusedModules(t *testing.T) {
	err := wasmhost.Validate(modules["importer"])
	if !errors.Is(err, wasmhost.ErrInvalid) || !strings.Contains(err.Error(), "imports env.foo, which the host does not offer") {
		t.Errorf("a module importing env.foo: %v", err)
	}
	err = wasmhost.Validate([]byte("#!/bin/sh\necho hello\n"))
	if !errors.Is(err, wasmhost.ErrNotWasm) || !strings.Contains(err.Error(), `not a WebAssembly module: it starts with "#!/bin/s"`) {
		t.Errorf("a shell script: %v", err)
	}
	if err := wasmhost.Validate(modules["wordsplit"]); err != nil {
		t.Errorf("wordsplit: %v", err)
	}
	in := instance(t, wasmhost.Default(), "kinds", wasmhost.Config{})
	if _, err := call(t, in, "nosuch", rec{}); err == nil || !strings.Contains(err.Error(), "does not export the function nosuch") {
		t.Errorf("a function the module lacks: %v", err)
	}
}

// TestHostileCalls: a loop is stopped by the call timeout, a 4 GiB allocation by the memory
// limit, a panic outside the SDK exits the module: each an error naming the module, the
// function and the cause; the instance is broken after it, and another instance of the same
// host keeps working.
func TestHostileCalls(t *testing.T) {
	h := wasmhost.Default()
	lg := &logs{}
	cfg := wasmhost.Config{Label: "t", Logger: hclog.New(&hclog.LoggerOptions{Output: lg}), CallTimeout: 200 * time.Millisecond}
	good := instance(t, h, "kinds", cfg)
	for _, tc := range []struct {
		module, fn string
		want       []string
	}{
		{"loop", "spin", []string{"function spin: the call ran over its time limit of 200ms (call_timeout_ms) and was stopped"}},
		{"alloc", "hog", []string{"function hog: wasm error: unreachable; its stderr: fatal error: out of memory"}},
		{"boom", "boom", []string{"function boom: wasm error: unreachable; its stderr: panic: boom: the function gave up"}},
	} {
		in := instance(t, h, tc.module, cfg)
		_, err := call(t, in, tc.fn, rec{"k", "v", 1})
		if !errors.Is(err, wasmhost.ErrTrap) {
			t.Errorf("%s: %v, want an ErrTrap", tc.module, err)
			continue
		}
		sha := wasmhost.Sum(modules[tc.module])[:12]
		for _, w := range append(tc.want, "module "+sha) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want %q in it", tc.module, err, w)
			}
		}
		if _, again := call(t, in, tc.fn, rec{}); again == nil || again.Error() != err.Error() {
			t.Errorf("%s: a call after the failure: %v", tc.module, again)
		}
		if in.Stats().Traps != 1 {
			t.Errorf("%s: stats %+v, want 1 trap", tc.module, in.Stats())
		}
		if got, err := call(t, good, "upper", rec{"k", "v", 1}); err != nil || fmt.Sprint(got) != "[0:k=V@1]" {
			t.Errorf("after %s, the good instance: %v %v", tc.module, got, err)
		}
	}
	if !strings.Contains(lg.String(), "panic: boom: the function gave up") || !strings.Contains(lg.String(), "module=") {
		t.Errorf("the module's stderr is not in the log, labelled: %s", lg.String())
	}
}

// TestFunctionErrors: an error a handler returns, or a panic inside the SDK's handler, fails the
// call with its message; the instance goes on.
func TestFunctionErrors(t *testing.T) {
	in := instance(t, wasmhost.Default(), "kinds", wasmhost.Config{})
	_, err := call(t, in, "upper", rec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Init([]byte(`{"suffix":`)); err == nil || !strings.Contains(err.Error(), "function jm_init returned an error: unexpected end of JSON input") {
		t.Errorf("a bad config: %v", err)
	}
}

// TestCompiledOncePerHost: instances of one module in one host compile it once; a second
// instance starts from the compiled module.
func TestCompiledOncePerHost(t *testing.T) {
	h := wasmhost.NewWithCacheDir(wasmbuild.CacheDir())
	t.Cleanup(func() { _ = h.Close() })
	b := modules["wordsplit"]
	start := time.Now()
	instance(t, h, "wordsplit", wasmhost.Config{})
	first := time.Since(start)
	start = time.Now()
	instance(t, h, "wordsplit", wasmhost.Config{})
	t.Logf("first instance %v (compiles), second %v (cached)", first, time.Since(start))
	if n := h.Compiled(); n != 1 {
		t.Errorf("%d modules compiled, want 1", n)
	}
	_ = b
}
