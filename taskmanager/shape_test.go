package taskmanager

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
	"testing"
)

// maxTaskManagerMethods bounds the TaskManager type: it wires its parts together (slotTable,
// leaderLink, fence, the data plane) and keeps the process's lifecycle; work of its own belongs
// in one of those parts or a new one (DESIGN.md, "Parts").
const maxTaskManagerMethods = 40

// TestTaskManagerStaysAnAssembly counts the methods declared on TaskManager in the package's
// non-test files.
func TestTaskManagerStaysAnAssembly(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, p := range pkgs {
		for name, f := range p.Files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
					continue
				}
				typ := fd.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if id, ok := typ.(*ast.Ident); ok && id.Name == "TaskManager" {
					methods = append(methods, name+": "+fd.Name.Name)
				}
			}
		}
	}
	sort.Strings(methods)
	if len(methods) == 0 {
		t.Fatal("found no method of TaskManager: the test reads the wrong files")
	}
	if len(methods) > maxTaskManagerMethods {
		t.Fatalf("TaskManager has %d methods, over %d: move work into its parts\n%s", len(methods), maxTaskManagerMethods, strings.Join(methods, "\n"))
	}
	t.Logf("TaskManager has %d methods (at most %d)", len(methods), maxTaskManagerMethods)
}
