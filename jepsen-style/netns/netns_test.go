package netns

import (
	"errors"
	"strings"
	"testing"
)

func TestSetupCommandsNeverTouchTheHostNamespace(t *testing.T) {
	topo, err := NewTopology("t1")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range topo.SetupCommands() {
		switch {
		case c[0] == "netns" && c[1] == "add" && strings.HasPrefix(c[2], "jmc-t1-"):
		case c[0] == "-n" && strings.HasPrefix(c[1], "jmc-t1-"):
		default:
			t.Fatalf("command not confined to a run namespace: ip %v", c)
		}
		if strings.Contains(strings.Join(c, " "), "type veth") && !strings.Contains(strings.Join(c, " "), "netns jmc-t1-") {
			t.Fatalf("veth peer not moved into a node namespace: %v", c)
		}
	}
}

func TestTopologyNamesAndAddresses(t *testing.T) {
	topo, _ := NewTopology("abc")
	if got := topo.NS("jm1"); got != "jmc-abc-jm1" {
		t.Fatalf("NS = %q", got)
	}
	if got := topo.BridgeNS(); got != "jmc-abc-br" {
		t.Fatalf("BridgeNS = %q", got)
	}
	if got := topo.IP("tm2"); got != "10.77.0.22" {
		t.Fatalf("IP(tm2) = %q", got)
	}
	if got := len(topo.Namespaces()); got != 8 {
		t.Fatalf("%d namespaces, want 8", got)
	}
	seen := map[string]bool{}
	for _, n := range topo.Nodes {
		if seen[n.IP()] {
			t.Fatalf("duplicate address %s", n.IP())
		}
		seen[n.IP()] = true
		if len(vethName(n.Name)) > 15 {
			t.Fatalf("veth name %q too long", vethName(n.Name))
		}
	}
}

func TestValidRunID(t *testing.T) {
	for _, bad := range []string{"", "A", "a b", "a;rm", strings.Repeat("a", 41)} {
		if ValidRunID(bad) == nil {
			t.Errorf("ValidRunID(%q) accepted", bad)
		}
	}
	if err := ValidRunID("kill-leader-s1-120000"); err != nil {
		t.Fatal(err)
	}
}

func TestRunNamespacesAndList(t *testing.T) {
	listing := parseList("jmc-a-jm1 (id: 3)\nother\njmc-b-br\n\njmc-a-br (id: 1)\n")
	if got := RunNamespaces(listing, ""); strings.Join(got, ",") != "jmc-a-br,jmc-a-jm1,jmc-b-br" {
		t.Fatalf("all = %v", got)
	}
	if got := RunNamespaces(listing, "a"); strings.Join(got, ",") != "jmc-a-br,jmc-a-jm1" {
		t.Fatalf("run a = %v", got)
	}
}

func TestCmdlineHasMarker(t *testing.T) {
	line := func(args ...string) []byte { return []byte(strings.Join(args, "\x00") + "\x00") }
	cases := []struct {
		cmd  []byte
		want bool
	}{
		{line("ip", "netns", "exec", "jmc-r1-jm1", "/bin/jmnode"), true},
		{line("/bin/jmnode", "jobmaster", "--data-dir", "/w/runs/r1/jmc-r1-jm1/data"), true},
		{line("/bin/jmnode", "--work-dir=/w/runs/r1/jmc-r1-tm1/work"), true},
		{line("vim", "notes-about-jmc-things"), false},
		{line("bash"), false},
	}
	for _, c := range cases {
		if got := CmdlineHasMarker(c.cmd, "jmc-"); got != c.want {
			t.Errorf("CmdlineHasMarker(%q) = %v", c.cmd, got)
		}
	}
	if CmdlineHasMarker(line("x", "/w/jmc-r2-jm1/data"), "jmc-r1-") {
		t.Fatal("marker of another run matched")
	}
}

// TestTopologyWithFiveTMs: a scenario may ask for more TaskManagers; they get the next hosts.
func TestTopologyWithFiveTMs(t *testing.T) {
	topo, err := NewTopologyWith("t5", 5)
	if err != nil {
		t.Fatal(err)
	}
	if got := topo.TMs(); len(got) != 5 || got[4] != "tm5" || topo.IP("tm5") != "10.77.0.25" {
		t.Fatalf("TMs %v, tm5 at %s", got, topo.IP("tm5"))
	}
	if got := topo.JMs(); len(got) != 3 {
		t.Fatalf("JMs %v", got)
	}
	for _, n := range []int{0, MaxTMs + 1} {
		if _, err := NewTopologyWith("t5", n); !errors.Is(err, ErrBadTMCount) {
			t.Fatalf("%d TMs: %v", n, err)
		}
	}
}

func TestSpareJobMasterIsANamespaceButNotAStartingJM(t *testing.T) {
	topo, err := NewTopology("spare")
	if err != nil {
		t.Fatal(err)
	}
	if err := topo.AddSpareJMs(1); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(topo.JMs(), ","); got != "jm1,jm2,jm3" {
		t.Fatalf("JMs = %s, want the three that start", got)
	}
	if got := strings.Join(topo.Spares(), ","); got != "jm4" || topo.IP("jm4") != "10.77.0.14" {
		t.Fatalf("Spares = %s at %s, want jm4 at 10.77.0.14", got, topo.IP("jm4"))
	}
	ns, found := topo.NS("jm4"), false
	for _, n := range topo.Namespaces() {
		found = found || n == ns
	}
	if !found {
		t.Fatalf("namespaces %v lack %s", topo.Namespaces(), ns)
	}
	veth := false
	for _, c := range topo.SetupCommands() {
		if c[0] != "-n" && !(c[0] == "netns" && c[1] == "add") {
			t.Fatalf("command %v names no namespace", c)
		}
		veth = veth || strings.Join(c, " ") == "-n "+ns+" addr add 10.77.0.14/24 dev eth0"
	}
	if !veth {
		t.Fatalf("no address for jm4 in %v", topo.SetupCommands())
	}
	if err := topo.AddSpareJMs(MaxSpareJMs); !errors.Is(err, ErrBadSpareCount) {
		t.Fatalf("AddSpareJMs past the limit: %v", err)
	}
}
