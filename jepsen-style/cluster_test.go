package jepsen

import (
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/netns"
	"github.com/jmcluster/jmcluster/security"
)

// TestClusterCommandLines: every process runs inside its namespace, listens on its own
// address, carries the run's marker in its command line (so `jepsen clean` finds it), and the
// JMs join each other, the TMs every JM; all share the run's checkpoint storage root.
func TestClusterCommandLines(t *testing.T) {
	topo, err := netns.NewTopology("t1")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCluster(topo, "/opt/jmnode", t.TempDir(), ClusterOptions{Failpoints: "early-gate"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	flag := func(args []string, name string) string { return flagValue(t, args, name) }
	for _, p := range c.procs.Procs() {
		args := p.Args()
		if want := []string{"ip", "netns", "exec", topo.NS(p.Name)}; !slices.Equal(p.Wrap, want) || p.Dir == "" || len(p.Env) != 2 {
			t.Fatalf("%s: wrap %v, dir %q, env %v", p.Name, p.Wrap, p.Dir, p.Env)
		}
		if !slices.Contains(p.Env, "JMNODE_FAILPOINTS=early-gate") || !slices.Contains(p.Env, "JMNODE_FAILPOINTS_FILE="+failpointsFile(c.runDir, topo, p.Name)) {
			t.Fatalf("%s: env %v", p.Name, p.Env)
		}
		if !strings.Contains(strings.Join(args, " "), topo.Marker()) {
			t.Fatalf("%s: no run marker in %v", p.Name, args)
		}
		if !strings.HasPrefix(flag(args, "--grpc-addr"), topo.IP(p.Name)+":") {
			t.Fatalf("%s: %v", p.Name, args)
		}
		// One checkpoint storage root for every JM and TM: a region restores where it moved.
		if got := flag(args, "--checkpoint-dir"); got != CheckpointDir(c.runDir) {
			t.Fatalf("%s: --checkpoint-dir %q, want the run's %s", p.Name, got, CheckpointDir(c.runDir))
		}
		// The stall watch dumps every JM's goroutines from its pprof port, on its own address.
		if strings.HasPrefix(p.Name, "jm") {
			if got, want := flag(args, "--pprof-addr"), fmt.Sprintf("%s:%d", topo.IP(p.Name), PortPprof); got != want {
				t.Fatalf("%s: --pprof-addr %q, want %s", p.Name, got, want)
			}
		}
	}
	jm2 := c.procs.Proc("jm2").Args()
	if got := flag(jm2, "--join"); got != "10.77.0.11:7100,10.77.0.13:7100" {
		t.Fatalf("jm2 --join %s", got)
	}
	tm1 := c.procs.Proc("tm1").Args()
	if flag(tm1, "--jm") != "10.77.0.11:7100,10.77.0.12:7100,10.77.0.13:7100" || flag(tm1, "--fence-timeout") != "5s" || flag(tm1, "--slots") != "6" {
		t.Fatalf("tm1: %v", tm1)
	}
	if got := c.Down(); len(got) != 6 {
		t.Fatalf("down before the start: %v", got)
	}
}

// TestTLSModeCredentials: in TLS mode every process gets a certificate of its role for its
// namespace address, from the run's CA, and the gossip key; a JobMaster's certificate verifies
// for the address the clients dial, and the clients hold an operator certificate.
func TestTLSModeCredentials(t *testing.T) {
	topo, err := netns.NewTopology("t2")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCluster(topo, "/opt/jmnode", t.TempDir(), ClusterOptions{TLS: true}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	flag := func(args []string, name string) string { return flagValue(t, args, name) }
	keys := map[string]bool{}
	for _, p := range c.procs.Procs() {
		args := p.Args()
		keys[flag(args, "--gossip-key")] = true
		sec, err := security.Load(security.Files{CA: flag(args, "--tls-ca"), Cert: flag(args, "--tls-cert"), Key: flag(args, "--tls-key")}, nil)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		want := security.RoleTaskManager
		if strings.HasPrefix(p.Name, "jm") {
			want = security.RoleJobMaster
		}
		id := sec.Identity()
		if id.Role != want || id.Name != p.Name {
			t.Fatalf("%s: certificate of %s, want %s (%s)", p.Name, id, p.Name, want)
		}
		cert, err := sec.ServerConfig().GetCertificate(nil)
		if err != nil || cert == nil {
			t.Fatalf("%s: no certificate: %v", p.Name, err)
		}
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := leaf.VerifyHostname(topo.IP(p.Name)); err != nil {
			t.Fatalf("%s: certificate does not name its address: %v", p.Name, err)
		}
	}
	if len(keys) != 1 {
		t.Fatalf("gossip keys: %d different ones, want one shared", len(keys))
	}
	cl, err := c.ClientTLS()
	if err != nil || cl == nil || cl.Identity().Role != security.RoleOperator {
		t.Fatalf("client TLS %v, %v; want an operator certificate", cl, err)
	}
}

// flagValue is the value of flag name in args, failing the test when it is missing.
func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	i := slices.Index(args, name)
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("%s missing in %v", name, args)
	}
	return args[i+1]
}
