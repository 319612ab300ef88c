package docs

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// designPending are DESIGN.md files allowed, while their package is being moved, not to open
// with their files yet, each with its reason (none today). A line whose DESIGN.md passes fails
// the test, so the list only shrinks.
var designPending = map[string]string{}

// designProblems checks one DESIGN.md: its first section is "## Files", a table headed
// "| file |", and every non-test Go file of its directory (goFiles) is named in the table's
// first column, by name or by a back-quoted glob (`store_*.go`).
func designProblems(doc string, goFiles []string) []string {
	lines := strings.Split(doc, "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "## ") })
	if i < 0 || strings.TrimSpace(lines[i]) != "## Files" {
		return []string{"its first section is not \"## Files\""}
	}
	i++
	for i < len(lines) && strings.TrimSpace(lines[i]) == "" {
		i++
	}
	if i == len(lines) || !strings.HasPrefix(lines[i], "| file |") {
		return []string{"\"## Files\" does not open with a table headed \"| file | what it holds |\""}
	}
	var named []string
	for _, l := range lines[i+1:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		named = append(named, quoted(strings.Split(strings.Trim(l, "|"), "|")[0])...)
	}
	var problems []string
	for _, f := range goFiles {
		if !slices.ContainsFunc(named, func(p string) bool { ok, _ := path.Match(p, f); return ok }) {
			problems = append(problems, f+" is not in its table of files")
		}
	}
	return problems
}

// TestEveryDesignOpensWithItsFiles: every DESIGN.md of the module opens with the table of its
// package's files, and the table names every non-test Go file beside it.
func TestEveryDesignOpensWithItsFiles(t *testing.T) {
	checked := 0
	seen := map[string]bool{}
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && p != "..") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "DESIGN.md" {
			return nil
		}
		dir := filepath.Dir(p)
		rel, _ := filepath.Rel("..", dir)
		rel = filepath.ToSlash(rel)
		doc, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		var goFiles []string
		for _, e := range entries {
			if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
				goFiles = append(goFiles, n)
			}
		}
		checked++
		seen[rel] = true
		problems := designProblems(string(doc), goFiles)
		switch _, pending := designPending[rel]; {
		case pending && len(problems) == 0:
			t.Errorf("%s/DESIGN.md opens with its files now: remove it from designPending", rel)
		case !pending:
			for _, pr := range problems {
				t.Errorf("%s/DESIGN.md: %s", rel, pr)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for rel := range designPending {
		if !seen[rel] {
			t.Errorf("designPending names %s, which has no DESIGN.md: remove it", rel)
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d DESIGN.md files; the walk is broken", checked)
	}
	t.Logf("%d DESIGN.md files checked, %d pending", checked, len(designPending))
}

func TestDesignCheckerFlags(t *testing.T) {
	good := "# x — design\n\n## Files\n\n| file | what it holds |\n| --- | --- |\n| `a.go`, `b.go` | a and b |\n| `store_*.go` | stores |\n\n## Purpose\n\nText naming `c.go`.\n"
	if p := designProblems(good, []string{"a.go", "b.go", "store_jobs.go"}); len(p) != 0 {
		t.Errorf("a good design flagged: %v", p)
	}
	for name, c := range map[string]struct {
		doc   string
		files []string
		want  string
	}{
		"purpose first":          {"# x\n\n## Purpose\n\n## Files\n\n| file | what it holds |\n", nil, "first section"},
		"no table":               {"# x\n\n## Files\n\nText.\n", nil, "does not open with a table"},
		"a file the table lacks": {good, []string{"a.go", "c.go"}, "c.go is not in its table"},
	} {
		p := designProblems(c.doc, c.files)
		if len(p) != 1 || !strings.Contains(p[0], c.want) {
			t.Errorf("%s: %q, want one problem saying %q", name, p, c.want)
		}
	}
}
