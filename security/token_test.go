package security_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/security"
)

func TestTokenFileParsesAndRefusesBadLines(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "tokens")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ body, err string }{
		{"alice operator\n", "want NAME ROLE SECRET"},
		{"tm taskmanager 0123456789abcdef0123\n", "a token is an operator or a reader"},
		{"alice operator short\n", "is 5 characters, under the minimum of 16"},
		{"a reader 0123456789abcdef\nb reader 0123456789abcdef\n", "another token's"},
		{"a reader 0123456789abcdef\na operator fedcba9876543210\n", `a second token named "a"`},
	} {
		if _, err := security.LoadTokens(write(c.body), nil); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: %v; want an error containing %q", c.body, err, c.err)
		}
	}
	p := write("# people\n\nalice operator 0123456789abcdef\n  dash   reader   fedcba9876543210  \n")
	tk, err := security.LoadTokens(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := tk.Lookup("fedcba9876543210"); err != nil || id.String() != "dash (reader token)" {
		t.Fatalf("dash: %v, %v", id, err)
	}
	if _, err := tk.Lookup("0123456789abcdeX"); err == nil {
		t.Fatal("an unknown secret was accepted")
	}
	// Changed on disk: the new file is used; a broken one keeps the previous tokens.
	write("bob operator 1111111111111111111\n")
	if id, err := tk.Lookup("1111111111111111111"); err != nil || id.Name != "bob" {
		t.Fatalf("after the change: %v, %v", id, err)
	}
	if _, err := tk.Lookup("0123456789abcdef"); err == nil {
		t.Fatal("a removed token still works")
	}
	write("bob operator\n")
	if id, err := tk.Lookup("1111111111111111111"); err != nil || id.Name != "bob" {
		t.Fatalf("after a broken change: %v, %v; want bob still", id, err)
	}
}
