package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/security"
)

// TestTLSCommandsWriteFilesAndRefuseToOverwrite: jmnode tls ca create and tls cert create
// write the files a process loads, in --dir, and never over an existing file.
func TestTLSCommandsWriteFilesAndRefuseToOverwrite(t *testing.T) {
	dir := t.TempDir()
	if err := runCLI([]string{"tls", "ca", "create", "--dir", dir}); err != nil {
		t.Fatal(err)
	}
	if err := runCLI([]string{"tls", "ca", "create", "--dir", dir}); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("a second CA: %v", err)
	}
	if err := runCLI([]string{"tls", "cert", "create", "--dir", dir, "--role", "jobmaster", "--name", "jm1", "--ip", "10.1.2.3", "--dns", "jm1.example,jm1"}); err != nil {
		t.Fatal(err)
	}
	if err := runCLI([]string{"tls", "cert", "create", "--dir", dir, "--role", "jobmaster", "--name", "jm1"}); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("the same certificate again: %v", err)
	}
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--role", "admin", "--name", "x"}, "unknown role"},
		{[]string{"--name", "x"}, "--role and --name are required"},
		{[]string{"--role", "reader", "--name", "x", "--ip", "nope"}, `--ip "nope" is not an IP address`},
		{[]string{"--role", "reader", "--name", "x", "--ca", filepath.Join(dir, "missing.pem")}, "jmnode tls ca create"},
	} {
		err := runCLI(append([]string{"tls", "cert", "create", "--dir", dir}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%v: %v; want an error containing %q", c.args, err, c.err)
		}
	}
	s, err := security.Load(security.Files{CA: filepath.Join(dir, security.CAFile), Cert: filepath.Join(dir, "jobmaster-jm1.pem"), Key: filepath.Join(dir, "jobmaster-jm1-key.pem")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if id := s.Identity(); id.Name != "jm1" || id.Role != security.RoleJobMaster {
		t.Fatalf("identity %v", id)
	}
}

// TestTLSProcessCluster runs real processes with the files jmnode tls writes: three
// JobMasters and a TaskManager with mutual TLS, and the CLI with an operator and a reader
// certificate and without one. The reader lists and cannot submit; the operator submits;
// plaintext is refused; a TaskManager certificate cannot start a JobMaster.
func TestTLSProcessCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	o, flags, ca, certs := tlsProcs(t, 1)
	d := newProcessCluster(t, o)
	d.sec = operatorTLS(t, ca, certs)
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.waitTMs(ctx, 30*time.Second, 1, 0); err != nil {
		t.Fatal(err)
	}
	addr := leader.LeaderGrpcAddress
	job := "../../examples/streaming-checksum.json"
	cli := func(who []string, args ...string) error {
		return runCLI(append(args, append([]string{"--addr", addr, "--timeout", "5s"}, who...)...))
	}
	if err := cli(flags("reader", "rita"), "job", "list"); err != nil {
		t.Errorf("reader job list: %v", err)
	}
	if err := cli(flags("reader", "rita"), "job", "submit", job); err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Errorf("reader job submit: %v; want PermissionDenied", err)
	}
	if err := cli(flags("operator", "alice"), "job", "submit", job); err != nil {
		t.Errorf("operator job submit: %v", err)
	}
	if err := cli(nil, "raft", "peers"); err == nil {
		t.Error("a plaintext raft peers was answered")
	}
	for _, p := range d.JMs {
		if log := p.LogTail(400); strings.Contains(log, "PLAINTEXT") {
			t.Errorf("%s logged the plaintext warning with TLS on", p.Name)
		}
	}
	// A JobMaster with a TaskManager's certificate refuses to start.
	err = runCLI(append([]string{"jobmaster", "--id", "jmx", "--data-dir", t.TempDir()}, flags("taskmanager", "tm")...))
	if err == nil || !strings.Contains(err.Error(), "needs a jobmaster certificate") {
		t.Errorf("a JobMaster with a TaskManager certificate: %v", err)
	}
}

// tlsProcs makes a CA and certificates (jobmaster jm, taskmanager tm, operator alice, reader
// rita) and returns the options of a process cluster of tms TaskManagers using them, with an
// encrypted gossip pool: flags(role, name) are the TLS flags of a certificate.
func tlsProcs(t *testing.T, tms int) (o proccluster.LocalOptions, flags func(role, name string) []string, ca, certs string) {
	t.Helper()
	certs = t.TempDir()
	mk := func(args ...string) {
		t.Helper()
		if err := runCLI(append([]string{"tls"}, append(args, "--dir", certs)...)); err != nil {
			t.Fatal(err)
		}
	}
	mk("ca", "create")
	mk("cert", "create", "--role", "jobmaster", "--name", "jm")
	mk("cert", "create", "--role", "taskmanager", "--name", "tm")
	mk("cert", "create", "--role", "operator", "--name", "alice")
	mk("cert", "create", "--role", "reader", "--name", "rita")
	ca = filepath.Join(certs, security.CAFile)
	flags = func(role, name string) []string {
		return []string{"--tls-ca", ca, "--tls-cert", filepath.Join(certs, role+"-"+name+".pem"), "--tls-key", filepath.Join(certs, role+"-"+name+"-key.pem")}
	}
	key, err := membership.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	o = fastProcs
	o.TMs = tms
	o.JMFlags = append(append([]string(nil), o.JMFlags...), append(flags("jobmaster", "jm"), "--gossip-key", key)...)
	o.TMFlags = append(append([]string(nil), o.TMFlags...), append(flags("taskmanager", "tm"), "--gossip-key", key)...)
	return o, flags, ca, certs
}

// operatorTLS is the operator alice's client TLS.
func operatorTLS(t *testing.T, ca, certs string) *security.TLS {
	t.Helper()
	op, err := security.Load(security.Files{CA: ca, Cert: filepath.Join(certs, "operator-alice.pem"), Key: filepath.Join(certs, "operator-alice-key.pem")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return op
}
