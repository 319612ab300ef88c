package docs

import (
	"strings"
	"testing"
)

// The checker on a synthetic import graph: a broken rule is named with the importer, the
// imported package and the rule; a package without a row, or with two, is named too.
func TestImportCheckerFailsOnABrokenRule(t *testing.T) {
	doc := "Some text.\n\n" + rulesHeader + `
| --- | --- |
| ` + "`transport/pb`" + ` | nothing |
| ` + "`internal/...`" + ` | nothing |
| ` + "`graph`" + ` | ` + "`transport/pb`" + ` (the wire types only) |
| ` + "`fsm`" + ` | ` + "`graph`, `transport/pb`, `internal/...`" + ` |
| ` + "`testkit/...`, `jepsen-style/...`" + ` | ` + "`fsm`" + ` |

After the table.
`
	rules, err := parseRules(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 5 || len(rules[4].pkgs) != 2 || len(rules[2].allowed) != 1 {
		t.Fatalf("parsed %+v", rules)
	}

	clean := []pkg{
		{path: "transport/pb"},
		{path: "internal/failpoint"},
		{path: "graph", imports: []string{"transport/pb"}},
		{path: "fsm", imports: []string{"graph", "internal/failpoint", "transport/pb"}},
		{path: "testkit/x", imports: []string{"fsm"}, testImports: []string{"graph"}},
	}
	if findings := checkImports(rules, clean); len(findings) != 0 {
		t.Fatalf("a graph within the rules: %v", findings)
	}

	cases := []struct {
		name string
		pkgs []pkg
		want []string // each must appear in one finding
	}{
		{"an import the rule does not allow",
			[]pkg{{path: "graph", imports: []string{"transport/pb", "fsm"}}},
			[]string{"graph imports fsm", "the rule for `graph`", "allows only transport/pb"}},
		{"an import of a package that allows nothing",
			[]pkg{{path: "internal/failpoint", imports: []string{"graph"}}},
			[]string{"internal/failpoint imports graph", "the rule for `internal/...`", "nothing of the module"}},
		{"a production package importing a test harness",
			[]pkg{{path: "fsm", imports: []string{"graph", "testkit/x"}}},
			[]string{"fsm imports testkit/x", "the rule for `fsm`"}},
		{"a package no rule names",
			[]pkg{{path: "dataplane", imports: []string{"graph"}}},
			[]string{"dataplane: no rule names it"}},
		{"a test importing a command",
			[]pkg{{path: "fsm", testImports: []string{"cmd/jmnode"}}},
			[]string{"fsm's tests import cmd/jmnode"}},
	}
	for _, c := range cases {
		findings := checkImports(rules, c.pkgs)
		if len(findings) != 1 {
			t.Errorf("%s: want one finding, got %q", c.name, findings)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(findings[0], w) {
				t.Errorf("%s: finding %q does not say %q", c.name, findings[0], w)
			}
		}
	}

	twice := append(rules, rule{name: "`fsm` again", pkgs: []string{"fsm"}})
	findings := checkImports(twice, []pkg{{path: "fsm"}})
	if len(findings) != 1 || !strings.Contains(findings[0], "fsm: named by 2 rules") {
		t.Errorf("a package two rules name: %q", findings)
	}
}

func TestImportRulesTableIsRead(t *testing.T) {
	for name, doc := range map[string]string{
		"no table":                "# a page without the table\n",
		"an empty cell":           rulesHeader + "\n| --- | --- |\n| `fsm` | |\n",
		"a row without a package": rulesHeader + "\n| --- | --- |\n| fsm | `graph` |\n",
	} {
		if rules, err := parseRules(strings.NewReader(doc)); err == nil {
			t.Errorf("%s: read as %+v, want an error", name, rules)
		}
	}
}
