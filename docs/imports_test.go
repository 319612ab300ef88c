// Package docs holds the project's documentation and the tests that keep the shape it
// describes: the import rules of architecture.md (the table in that page, read by this test, so
// the page and the check cannot drift apart) and every DESIGN.md opening with its files.
package docs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	module   = "github.com/jmcluster/jmcluster"
	rulesDoc = "architecture.md"
	// rulesHeader opens the table of import rules in rulesDoc.
	rulesHeader = "| package | may import, of the module |"
)

// rule is one row of the table: the packages its patterns name may import, of the module, only
// what its allowed patterns name. A pattern is a package path relative to the module, or
// "p/..." for p and every package under it.
type rule struct {
	name    string // the row's package column, as written
	pkgs    []string
	allowed []string
}

// pkg is one package of the module: its path relative to the module, the module packages its
// non-test files import, and those its test files import.
type pkg struct {
	path        string
	imports     []string
	testImports []string
}

func matches(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return pattern == path
}

func matchesAny(patterns []string, path string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return matches(p, path) })
}

// parseRules reads the table that starts at rulesHeader: each row's first cell names packages
// and its second cell the packages they may import, both as back-quoted patterns (a cell that
// starts with "nothing" for none). Text outside back quotes is commentary.
func parseRules(doc io.Reader) ([]rule, error) {
	var rules []rule
	in := false
	sc := bufio.NewScanner(doc)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if !in {
			in = text == rulesHeader
			continue
		}
		if !strings.HasPrefix(text, "|") {
			break
		}
		cells := strings.Split(strings.Trim(text, "|"), "|")
		if strings.Trim(cells[0], " -") == "" {
			continue // the separator row
		}
		if len(cells) < 2 {
			return nil, fmt.Errorf("line %d: want | package | may import |, got %q", line, text)
		}
		r := rule{name: strings.TrimSpace(cells[0]), pkgs: quoted(cells[0]), allowed: quoted(cells[1])}
		if len(r.pkgs) == 0 {
			return nil, fmt.Errorf("line %d: no `package` pattern in %q", line, cells[0])
		}
		if len(r.allowed) == 0 && !strings.HasPrefix(strings.TrimSpace(cells[1]), "nothing") {
			return nil, fmt.Errorf("line %d: the second cell names no `package` and is not \"nothing\": %q", line, cells[1])
		}
		rules = append(rules, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !in {
		return nil, fmt.Errorf("no table headed %q", rulesHeader)
	}
	return rules, nil
}

// quoted returns the back-quoted words of a table cell.
func quoted(cell string) []string {
	var out []string
	parts := strings.Split(cell, "`")
	for i := 1; i < len(parts); i += 2 {
		out = append(out, parts[i])
	}
	return out
}

// checkImports returns one finding per package without exactly one rule, per import its rule
// does not allow, and per test import of cmd/ (nothing imports a command).
func checkImports(rules []rule, pkgs []pkg) []string {
	var findings []string
	for _, p := range pkgs {
		var mine []rule
		for _, r := range rules {
			if matchesAny(r.pkgs, p.path) {
				mine = append(mine, r)
			}
		}
		switch len(mine) {
		case 0:
			findings = append(findings, fmt.Sprintf("%s: no rule names it in %s's import rules; add a row", p.path, rulesDoc))
			continue
		case 1:
		default:
			names := make([]string, len(mine))
			for i, r := range mine {
				names[i] = r.name
			}
			findings = append(findings, fmt.Sprintf("%s: named by %d rules (%s); a package has one row", p.path, len(mine), strings.Join(names, "; ")))
			continue
		}
		r := mine[0]
		for _, imp := range p.imports {
			if !matchesAny(r.allowed, imp) {
				allowed := "nothing of the module"
				if len(r.allowed) > 0 {
					allowed = strings.Join(r.allowed, ", ")
				}
				findings = append(findings, fmt.Sprintf("%s imports %s: the rule for %s allows only %s", p.path, imp, r.name, allowed))
			}
		}
		for _, imp := range p.testImports {
			if matches("cmd/...", imp) {
				findings = append(findings, fmt.Sprintf("%s's tests import %s: nothing imports a command", p.path, imp))
			}
		}
	}
	return findings
}

// modulePackages lists the module's packages with `go list`, their imports cut to the module's.
func modulePackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports,Error", "./...")
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	rel := func(paths []string) []string {
		var own []string
		for _, p := range paths {
			if p == module {
				own = append(own, ".")
			} else if r, ok := strings.CutPrefix(p, module+"/"); ok {
				own = append(own, r)
			}
		}
		slices.Sort(own)
		return slices.Compact(own)
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
			Error                              *struct{ Err string }
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		path := rel([]string{p.ImportPath})
		if len(path) == 0 {
			t.Fatalf("go list: %s is not in module %s", p.ImportPath, module)
		}
		pkgs = append(pkgs, pkg{path: path[0], imports: rel(p.Imports),
			testImports: rel(append(p.TestImports, p.XTestImports...))})
	}
	return pkgs
}

func TestImportRulesOfTheArchitecture(t *testing.T) {
	f, err := os.Open(rulesDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rules, err := parseRules(f)
	if err != nil {
		t.Fatalf("%s: %v", rulesDoc, err)
	}
	pkgs := modulePackages(t)
	paths := make([]string, len(pkgs))
	for i, p := range pkgs {
		paths[i] = p.path
	}
	for _, want := range []string{"transport/pb", "graph", "fsm", "jmserver", "agent", "cmd/jmnode"} {
		if !slices.Contains(paths, want) {
			t.Fatalf("go list found no %s among %d packages (%v): the walk is broken", want, len(paths), paths)
		}
	}
	for _, finding := range checkImports(rules, pkgs) {
		t.Error(finding)
	}
	for _, r := range rules {
		if !slices.ContainsFunc(paths, func(p string) bool { return matchesAny(r.pkgs, p) }) {
			t.Logf("the rule for %s names no package of the module yet", r.name)
		}
	}
	t.Logf("%d packages checked against %d rules", len(pkgs), len(rules))
}

// TestImportRuleReconcileUsesThePortOnly pins the note of reconcile's row: it reaches the
// JobMaster through jobmaster.Term, never the concrete *jobmaster.JobMaster.
func TestImportRuleReconcileUsesThePortOnly(t *testing.T) {
	files, err := filepath.Glob("../reconcile/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no reconcile sources: %v", err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "JobMaster" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "jobmaster" {
					t.Errorf("%s: reconcile names jobmaster.JobMaster; it uses the jobmaster.Term port only", fset.Position(sel.Pos()))
				}
			}
			return true
		})
	}
}
