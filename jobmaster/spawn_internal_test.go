package jobmaster

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// TestNoTermWorkStartsOnceStopWaits: RPC handlers (a heartbeat's deployment check, a
// registration) start term goroutines from outside the term while stop may be waiting for
// them. Every start goes through spawn, whose check and wait-group Add happen under the lock
// stop takes first: nothing starts once stop began, and what started is waited for. Before,
// a handler could call wg.Add while stop was in wg.Wait (the race detector reports it).
func TestNoTermWorkStartsOnceStopWaits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tm := &term{ctx: ctx, cancel: cancel}
	var running, after atomic.Int64
	var stopped atomic.Bool
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				tm.spawn(func() {
					if stopped.Load() {
						after.Add(1)
					}
					running.Add(1)
					<-tm.ctx.Done()
					running.Add(-1)
				})
			}
		}()
	}
	for running.Load() == 0 {
		// wait for some work to be in flight (each waits for the term to stop)
	}
	tm.stop()
	stopped.Store(true)
	if n := running.Load(); n != 0 {
		t.Fatalf("%d term goroutines still running after stop returned", n)
	}
	wg.Wait()
	if n := after.Load(); n != 0 {
		t.Fatalf("%d term goroutines started after stop returned", n)
	}
	if tm.spawn(func() {}) {
		t.Fatal("spawn started work on a stopped term")
	}
}

// TestTermGoroutinesStartThroughSpawn: outside newTerm (before the term is shared) and spawn
// itself, no code of the package adds to the term's wait group.
func TestTermGoroutinesStartThroughSpawn(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if filepath.Ext(name) != ".go" || len(name) > 8 && name[len(name)-8:] == "_test.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil || fd.Name.Name == "newTerm" || fd.Name.Name == "spawnLocked" {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Add" {
					return true
				}
				if inner, ok := sel.X.(*ast.SelectorExpr); ok && inner.Sel.Name == "wg" {
					if id, ok := inner.X.(*ast.Ident); ok && id.Name == "t" {
						t.Errorf("%s: %s adds to the term's wait group; start the goroutine with t.spawn", fset.Position(call.Pos()), fd.Name.Name)
					}
				}
				return true
			})
		}
	}
}
