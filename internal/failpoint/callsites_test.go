package failpoint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const importPath = "github.com/jmcluster/jmcluster/internal/failpoint"

// moduleRoot is the directory holding go.mod, two levels up from this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
	return root
}

// sourceFile is one hand-written, non-test Go file of the module.
type sourceFile struct {
	rel  string // slash path from the module root
	fset *token.FileSet
	f    *ast.File
}

// moduleSources parses every non-test, non-generated Go file of the module.
func moduleSources(t *testing.T) []sourceFile {
	t.Helper()
	root := moduleRoot(t)
	var out []sourceFile
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "bin" || name == "runs") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		out = append(out, sourceFile{rel: filepath.ToSlash(rel), fset: fset, f: f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 50 {
		t.Fatalf("parsed only %d files under %s; the walk is broken", len(out), root)
	}
	return out
}

// TestNoUnsafeNamesOutsideFailpoint: the planted bugs are failpoints, not switches threaded
// through configs. No struct field, variable (package-level, local, parameter or result),
// type or setter outside this package is named Unsafe*/unsafe* (generated code aside: gRPC's
// UnsafeXServiceServer interfaces).
func TestNoUnsafeNamesOutsideFailpoint(t *testing.T) {
	for _, sf := range moduleSources(t) {
		if strings.HasPrefix(sf.rel, "internal/failpoint/") {
			continue
		}
		for _, found := range unsafeNames(sf.fset, sf.f) {
			t.Errorf("%s: %s (make it a failpoint: docs/testing.md, \"Adding a failpoint\")", sf.rel, found)
		}
	}
}

func TestUnsafeNameCheckerFlags(t *testing.T) {
	src := `package x
type Config struct{ UnsafeThing bool; Other int }
type Unsafe struct{}
var unsafeHook func()
func (c *Config) SetUnsafeThing(on bool) { ok := on; _ = ok }
func f(unsafeArg int) (unsafeOut int) { for unsafeI := range 3 { _ = unsafeI }; unsafeLocal := 1; return unsafeLocal }
func unsafeHelper() {}
const unsafeDelay = 1
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(unsafeNames(fset, f), "\n")
	for _, want := range []string{"field UnsafeThing", "type Unsafe", "variable unsafeHook", "setter SetUnsafeThing",
		"variable unsafeArg", "variable unsafeOut", "variable unsafeI", "variable unsafeLocal"} {
		if !strings.Contains(got, want) {
			t.Errorf("not flagged: %s; flagged:\n%s", want, got)
		}
	}
	for _, allowed := range []string{"unsafeHelper", "unsafeDelay", "Other"} {
		if strings.Contains(got, allowed) {
			t.Errorf("flagged %s, which is neither a field, a variable, a type nor a setter:\n%s", allowed, got)
		}
	}
}

// unsafeNames lists the fields, variables, types and setters of f whose name contains "unsafe"
// in any case.
func unsafeNames(fset *token.FileSet, f *ast.File) []string {
	var out []string
	flag := func(what string, id *ast.Ident) {
		if id != nil && strings.Contains(strings.ToLower(id.Name), "unsafe") {
			out = append(out, fset.Position(id.Pos()).String()+": "+what+" "+id.Name)
		}
	}
	fields := func(what string, fl *ast.FieldList) {
		if fl == nil {
			return
		}
		for _, fd := range fl.List {
			for _, id := range fd.Names {
				flag(what, id)
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.StructType:
			fields("field", n.Fields)
		case *ast.FuncType:
			fields("variable", n.Params)
			fields("variable", n.Results)
		case *ast.FuncDecl:
			fields("variable", n.Recv)
			if strings.HasPrefix(n.Name.Name, "Set") {
				flag("setter", n.Name)
			}
		case *ast.TypeSpec:
			flag("type", n.Name)
		case *ast.GenDecl:
			if n.Tok == token.VAR {
				for _, s := range n.Specs {
					for _, id := range s.(*ast.ValueSpec).Names {
						flag("variable", id)
					}
				}
			}
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						flag("variable", id)
					}
				}
			}
		case *ast.RangeStmt:
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok {
						flag("variable", id)
					}
				}
			}
		}
		return true
	})
	return out
}

// TestEveryFailpointHasACallSite: each row of the table is checked (Enabled for a switch,
// Inject for a hook) somewhere outside this package, so no row is dead and no row is used
// with the wrong function.
func TestEveryFailpointHasACallSite(t *testing.T) {
	rows := tableRows(t)
	if len(rows) != len(registry) {
		t.Fatalf("table.go declares %d rows, the registry holds %d", len(rows), len(registry))
	}
	sites := map[string][]string{} // Go name -> "Enabled at file:line" ...
	for _, sf := range moduleSources(t) {
		if strings.HasPrefix(sf.rel, "internal/failpoint/") {
			continue
		}
		local := ""
		for _, imp := range sf.f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == importPath {
				local = "failpoint"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		if local == "" {
			continue
		}
		ast.Inspect(sf.f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			fn, ok := call.Fun.(*ast.SelectorExpr)
			if ok && isIdent(fn.X, local) && len(call.Args) == 0 {
				// A value read through a clock of this package (clock-offset: Now).
				for value, reader := range valueReaders {
					if fn.Sel.Name == reader {
						sites[value] = append(sites[value], "Duration (through "+reader+") at "+sf.fset.Position(call.Pos()).String())
					}
				}
			}
			if !ok || !isIdent(fn.X, local) || (fn.Sel.Name != "Enabled" && fn.Sel.Name != "Inject" && fn.Sel.Name != "Duration") || len(call.Args) == 0 {
				return true
			}
			arg := call.Args[len(call.Args)-1]
			if sel, ok := arg.(*ast.SelectorExpr); ok && isIdent(sel.X, local) {
				sites[sel.Sel.Name] = append(sites[sel.Sel.Name], fn.Sel.Name+" at "+sf.fset.Position(call.Pos()).String())
			}
			return true
		})
	}
	var names []string
	for name := range rows {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		want := map[string]string{"newSwitch": "Enabled", "newFault": "Enabled", "newHook": "Inject", "newValue": "Duration"}[rows[name]]
		if len(sites[name]) == 0 {
			t.Errorf("failpoint.%s has no call site: add failpoint.%s(..., failpoint.%s) where it acts, or remove its row", name, want, name)
		}
		for _, s := range sites[name] {
			if !strings.HasPrefix(s, want+" ") {
				t.Errorf("failpoint.%s is a %s row but is used with %s", name, rows[name], s)
			}
		}
	}
}

// valueReaders: the values this package reads for its callers, and the function that reads
// each (a call of it outside the package is the value's call site).
var valueReaders = map[string]string{"ClockOffset": "Now"}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// tableRows maps each Go name declared in table.go to its constructor (newSwitch, newFault or
// newHook).
func tableRows(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "table.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, id := range vs.Names {
				if call, ok := vs.Values[i].(*ast.CallExpr); ok {
					if fn, ok := call.Fun.(*ast.Ident); ok {
						rows[id.Name] = fn.Name
					}
				}
			}
		}
	}
	return rows
}
