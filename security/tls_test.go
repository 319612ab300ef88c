package security_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/security"
	"github.com/jmcluster/jmcluster/testkit/tlstest"
)

// serve accepts TLS connections on loopback with cfg, completes each handshake and reports
// the peer's certificate name, or the handshake error.
func serve(t *testing.T, cfg *tls.Config) (addr string, results <-chan string) {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	out := make(chan string, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
			if err := tc.Handshake(); err != nil {
				out <- "refused: " + err.Error()
			} else {
				out <- "accepted " + tc.ConnectionState().PeerCertificates[0].Subject.CommonName
			}
			_ = tc.Close()
		}
	}()
	return l.Addr().String(), out
}

// dial connects with cfg and returns the server certificate's name, or the error.
func dial(addr string, cfg *tls.Config) (string, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: cfg}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	tc := c.(*tls.Conn)
	// TLS 1.3: the client learns of a refused client certificate on its first read.
	_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !strings.Contains(err.Error(), "EOF") {
		return "", err
	}
	return tc.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

func TestMutualTLSAcceptsTheRightRoleAndRefusesTheRest(t *testing.T) {
	ca, other := tlstest.NewCA(t), tlstest.NewCA(t)
	jm := ca.TLS(t, security.RoleJobMaster, "jm1")
	addr, results := serve(t, jm.ServerConfig(security.RoleJobMaster))

	cases := []struct {
		name   string
		client *security.TLS
		ok     bool
	}{
		{"a jobmaster certificate of the CA", ca.TLS(t, security.RoleJobMaster, "jm2"), true},
		{"a taskmanager certificate", ca.TLS(t, security.RoleTaskManager, "tm1"), false},
		{"an operator certificate", ca.TLS(t, security.RoleOperator, "alice"), false},
		{"a jobmaster certificate of another CA", other.TLS(t, security.RoleJobMaster, "jm9"), false},
		{"an expired jobmaster certificate", ca.TLS(t, security.RoleJobMaster, "old", tlstest.Expired()), false},
	}
	for _, c := range cases {
		_, derr := dial(addr, c.client.ClientConfig(security.RoleJobMaster))
		got := <-results
		if c.ok != strings.HasPrefix(got, "accepted") || c.ok != (derr == nil) {
			t.Errorf("%s: server says %q, client says %v; want accepted %v", c.name, got, derr, c.ok)
		}
	}

	// A client without a certificate.
	_, derr := dial(addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if got := <-results; !strings.HasPrefix(got, "refused") || derr == nil {
		t.Errorf("a client without a certificate: server says %q, client %v", got, derr)
	}
}

func TestClientRefusesAServerOfTheWrongRoleCAOrHost(t *testing.T) {
	ca, other := tlstest.NewCA(t), tlstest.NewCA(t)
	client := ca.TLS(t, security.RoleTaskManager, "tm1")
	for _, c := range []struct {
		name   string
		server *security.TLS
		host   string
		err    string
	}{
		{"a taskmanager posing as a jobmaster", ca.TLS(t, security.RoleTaskManager, "tm2"), "127.0.0.1", "may not connect here"},
		{"a jobmaster of another CA", other.TLS(t, security.RoleJobMaster, "jm1"), "127.0.0.1", "unknown authority"},
		{"an expired jobmaster", ca.TLS(t, security.RoleJobMaster, "jm1", tlstest.Expired()), "127.0.0.1", "expired"},
		{"a jobmaster dialled by a name not in its certificate", ca.TLS(t, security.RoleJobMaster, "jm1"), "jm1.example", "not jm1.example"},
	} {
		addr, results := serve(t, c.server.ServerConfig())
		cfg := client.ClientConfig(security.RoleJobMaster)
		cfg.ServerName = c.host
		_, err := dial(addr, cfg)
		<-results
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: dial error %v, want one containing %q", c.name, err, c.err)
		}
	}
}

// TestCertificateReplacedOnDiskIsUsedByNewConnections: a process's certificate and CA are
// read again when the files change; connections opened afterwards present the new
// certificate, without a restart. A change that does not load keeps the previous files.
func TestCertificateReplacedOnDiskIsUsedByNewConnections(t *testing.T) {
	ca := tlstest.NewCA(t)
	files := ca.Files(t, security.RoleJobMaster, "jm1-old")
	server := tlstest.Load(t, files)
	addr, results := serve(t, server.ServerConfig())
	client := ca.TLS(t, security.RoleOperator, "alice")

	name, err := dial(addr, client.ClientConfig(security.RoleJobMaster))
	<-results
	if err != nil || name != "jm1-old" {
		t.Fatalf("before the change: server %q, %v", name, err)
	}
	ca.Write(t, files, security.RoleJobMaster, "jm1-new")
	name, err = dial(addr, client.ClientConfig(security.RoleJobMaster))
	<-results
	if err != nil || name != "jm1-new" {
		t.Fatalf("after replacing the certificate: server %q, %v; want jm1-new", name, err)
	}
	if id := server.Identity(); id.Name != "jm1-new" {
		t.Fatalf("identity after the change: %v", id)
	}

	// A broken certificate file: the previous certificate stays in use.
	if err := os.WriteFile(files.Cert, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	name, err = dial(addr, client.ClientConfig(security.RoleJobMaster))
	<-results
	if err != nil || name != "jm1-new" {
		t.Fatalf("after a broken file: server %q, %v; want jm1-new still", name, err)
	}

	// A new CA on both sides: the old certificates are refused, the new ones accepted.
	ca2 := tlstest.NewCA(t)
	if err := os.WriteFile(files.CA, ca2.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	ca2.Write(t, files, security.RoleJobMaster, "jm1-ca2")
	if _, err := dial(addr, client.ClientConfig(security.RoleJobMaster)); err == nil {
		t.Fatal("a client of the old CA was accepted after the server moved to a new CA")
	}
	<-results
	name, err = dial(addr, ca2.TLS(t, security.RoleOperator, "bob").ClientConfig(security.RoleJobMaster))
	<-results
	if err != nil || name != "jm1-ca2" {
		t.Fatalf("with the new CA: server %q, %v", name, err)
	}
}

func TestRoleOf(t *testing.T) {
	uri := func(s string) *url.URL { u, _ := url.Parse(s); return u }
	for _, c := range []struct {
		uris []*url.URL
		want security.Role
		err  string
	}{
		{[]*url.URL{security.RoleURI(security.RoleReader)}, security.RoleReader, ""},
		{[]*url.URL{uri("spiffe://example/x"), security.RoleURI(security.RoleOperator)}, security.RoleOperator, ""},
		{nil, "", "names no jmcluster role"},
		{[]*url.URL{uri("jmcluster://role/admin")}, "", "is not a role"},
		{[]*url.URL{security.RoleURI(security.RoleReader), security.RoleURI(security.RoleOperator)}, "", "names 2 roles"},
	} {
		got, err := security.RoleOf(&x509.Certificate{URIs: c.uris})
		if got != c.want || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%v: %q, %v; want %q, error containing %q", c.uris, got, err, c.want, c.err)
		}
	}
}

func TestCreateWritesFilesAndRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	certPath, keyPath, err := security.CreateCA(dir, security.DefaultCADays, now)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(keyPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key %s: %v, %v; want mode 0600", keyPath, fi.Mode(), err)
	}
	if _, _, err := security.CreateCA(dir, security.DefaultCADays, now); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("a second CA in the same directory: %v", err)
	}
	ca, err := security.LoadCA(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	req := security.CertRequest{Role: security.RoleTaskManager, Name: "tm1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	cert, key, err := security.CreateCert(ca, dir, req, security.DefaultCertDays, now)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(cert) != "taskmanager-tm1.pem" || filepath.Base(key) != "taskmanager-tm1-key.pem" {
		t.Fatalf("files %s, %s", cert, key)
	}
	s, err := security.Load(security.Files{CA: certPath, Cert: cert, Key: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if id := s.Identity(); id != (security.Identity{Name: "tm1", Role: security.RoleTaskManager}) {
		t.Fatalf("identity %v", id)
	}
	if _, _, err := security.CreateCert(ca, dir, req, security.DefaultCertDays, now); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("the same certificate again: %v", err)
	}
	if _, _, err := security.CreateCert(ca, dir, security.CertRequest{Role: security.RoleReader, Name: "r"}, security.DefaultCADays+1, now); err == nil || !strings.Contains(err.Error(), "outlive its CA") {
		t.Fatalf("a certificate outliving its CA: %v", err)
	}
	if _, _, err := security.CreateCert(ca, dir, security.CertRequest{Role: "admin", Name: "r"}, 1, now); err == nil || !strings.Contains(err.Error(), "unknown role") {
		t.Fatalf("an unknown role: %v", err)
	}
}
