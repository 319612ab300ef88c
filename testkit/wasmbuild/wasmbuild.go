// Package wasmbuild builds WebAssembly modules for tests: the examples (examples/wasm/...) and
// the test modules of testdata/ (each kind of operator, and the hostile ones), with the Go
// toolchain (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared), into a directory.
package wasmbuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Modules are the modules Build knows, by name: the package each is built from, relative to
// the module's root.
var Modules = map[string]string{
	"wordsplit": "examples/wasm/wordsplit",
	"fraud":     "examples/wasm/fraud",
	"kinds":     "testkit/wasmbuild/testdata/kinds",    // one function of each kind
	"loop":      "testkit/wasmbuild/testdata/loop",     // loops forever
	"alloc":     "testkit/wasmbuild/testdata/alloc",    // allocates 4 GiB
	"boom":      "testkit/wasmbuild/testdata/boom",     // panics outside the SDK: the module exits
	"big":       "testkit/wasmbuild/testdata/big",      // emits a record of 2 MiB
	"importer":  "testkit/wasmbuild/testdata/importer", // imports env.foo
}

// CacheDir is a directory of compiled code the tests of every package share (wazero's file
// cache), so a module is compiled once per machine, not once per test process: a 3 MB Go
// module takes seconds to compile, ten times that under the race detector.
func CacheDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("jmcluster-wasm-cache-%d", os.Getuid()))
}

// Root is the directory of the Go module.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build builds the named modules into dir (dir/NAME.wasm) and returns their paths by name.
func Build(dir string, names ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, name := range names {
		pkg, ok := Modules[name]
		if !ok {
			return nil, fmt.Errorf("wasmbuild: no module %q", name)
		}
		p := filepath.Join(dir, name+".wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", p, "./"+pkg)
		cmd.Dir = Root()
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("wasmbuild: build %s: %v: %s", name, err, strings.TrimSpace(string(b)))
		}
		out[name] = p
	}
	return out, nil
}

// MustRead builds the named modules into a temporary directory and returns their bytes by
// name; it panics on failure (for a TestMain). The directory is removed before it returns.
func MustRead(names ...string) map[string][]byte {
	dir, err := os.MkdirTemp("", "wasmbuild")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	paths, err := Build(dir, names...)
	if err != nil {
		panic(err)
	}
	out := map[string][]byte{}
	for name, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			panic(err)
		}
		out[name] = b
	}
	return out
}
