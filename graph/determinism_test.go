package graph

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The replicated state machine and the pure functions it uses must be deterministic: the
// proposer chooses times and ids, never the code that applies them. This test parses every
// non-test Go file of graph/ and fsm/ and fails on a forbidden import or call.

var bannedImports = map[string]bool{
	"math/rand":    true,
	"math/rand/v2": true,
	"crypto/rand":  true,
}

var bannedCalls = map[string]map[string]bool{
	"time": {"Now": true, "Since": true, "Until": true, "Tick": true, "After": true,
		"AfterFunc": true, "NewTimer": true, "NewTicker": true},
	"os": {"Getenv": true, "LookupEnv": true, "Environ": true},
}

// checkSource returns one finding per forbidden import or call in a Go source file.
func checkSource(fset *token.FileSet, filename string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, filename, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var findings []string
	local := map[string]string{} // local import name -> path
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if bannedImports[path] {
			findings = append(findings, fset.Position(imp.Pos()).String()+": imports "+path)
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		local[name] = path
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		if banned := bannedCalls[local[id.Name]]; banned[sel.Sel.Name] {
			findings = append(findings, fset.Position(sel.Pos()).String()+": uses "+local[id.Name]+"."+sel.Sel.Name)
		}
		return true
	})
	return findings, nil
}

func TestDeterminismOfGraphAndFSM(t *testing.T) {
	files := 0
	for _, dir := range []string{"../graph", "../fsm"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("read %s: %v", dir, err)
		}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			files++
			path := filepath.Join(dir, name)
			findings, err := checkSource(token.NewFileSet(), path, nil)
			if err != nil {
				t.Fatalf("parse %s: %v", path, err)
			}
			for _, f := range findings {
				t.Errorf("non-deterministic code: %s", f)
			}
		}
	}
	if files < 5 {
		t.Fatalf("checked only %d files; the walk is broken", files)
	}
}

func TestDeterminismCheckerFlags(t *testing.T) {
	cases := map[string]string{
		"time.Now": `package x
import "time"
func f() int64 { return time.Now().UnixMilli() }`,
		"aliased time.Since": `package x
import tm "time"
var start tm.Time
func f() tm.Duration { return tm.Since(start) }`,
		"math/rand import": `package x
import "math/rand"
func f() int { return rand.Int() }`,
		"crypto/rand import": `package x
import "crypto/rand"
var _ = rand.Reader`,
		"rand v2 import": `package x
import "math/rand/v2"
func f() int { return rand.IntN(3) }`,
		"os.Getenv": `package x
import "os"
func f() string { return os.Getenv("HOME") }`,
		"time.NewTicker value": `package x
import "time"
var mk = time.NewTicker`,
	}
	for name, src := range cases {
		findings, err := checkSource(token.NewFileSet(), name+".go", src)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(findings) == 0 {
			t.Errorf("%s: not flagged", name)
		}
	}
	clean := `package x
import "time"
func f(ms int64) time.Time { return time.UnixMilli(ms) }
type T struct{ time int }
func (t T) Now() int { return t.time }`
	findings, err := checkSource(token.NewFileSet(), "clean.go", clean)
	if err != nil || len(findings) != 0 {
		t.Errorf("clean source flagged: %v %v", findings, err)
	}
}
