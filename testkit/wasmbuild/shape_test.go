package wasmbuild_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/testkit/wasmbuild"
	"github.com/jmcluster/jmcluster/wasmhost"
)

// TestShape: a Shape passes the JobMaster's check with its functions, is exactly its size,
// and compiles; with InvalidCode it still passes the check but does not compile.
func TestShape(t *testing.T) {
	for _, size := range []int{0, 100, 1000, 1 << 20} {
		m := wasmbuild.Shape{Functions: []string{"map", "other"}, Size: size, Seed: 3}.Bytes()
		if size > 0 && len(m) != size {
			t.Errorf("size %d: %d bytes", size, len(m))
		}
		if err := wasmhost.Check(m, "map", "other"); err != nil {
			t.Errorf("size %d: %v", size, err)
		}
		if err := wasmhost.Check(m, "nosuch"); err == nil {
			t.Errorf("size %d: Check of a function it lacks passed", size)
		}
		if err := wasmhost.Validate(m); err != nil {
			t.Errorf("size %d: Validate: %v", size, err)
		}
	}
	a, b := wasmbuild.Shape{Size: 500, Seed: 1}.Bytes(), wasmbuild.Shape{Size: 500, Seed: 2}.Bytes()
	if wasmhost.Sum(a) == wasmhost.Sum(b) {
		t.Error("two seeds, one module")
	}
	bad := wasmbuild.Shape{Functions: []string{"map"}, InvalidCode: true}.Bytes()
	if err := wasmhost.Check(bad, "map"); err != nil {
		t.Errorf("InvalidCode: Check: %v", err)
	}
	if err := wasmhost.Validate(bad); !errors.Is(err, wasmhost.ErrInvalid) || !strings.Contains(err.Error(), "does not compile") {
		t.Errorf("InvalidCode: Validate: %v, want it not to compile", err)
	} else {
		t.Log(err)
	}
}
