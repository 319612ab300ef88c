// Package tlstest makes certificate authorities and role certificates in temporary
// directories for tests: real files, read by security.Load as a process reads them.
package tlstest

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/security"
)

// CA is a test certificate authority with its certificate in a file.
type CA struct {
	*security.CA
	// File is the CA certificate's PEM file (what --tls-ca names).
	File string
	dir  string
}

// NewCA makes a CA valid from a week ago to a week from now in a temporary directory of t.
func NewCA(t testing.TB) *CA {
	t.Helper()
	now := time.Now()
	ca, _, err := security.NewCA("test CA", now.Add(-7*24*time.Hour), now.Add(7*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, security.CAFile)
	if err := os.WriteFile(file, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return &CA{CA: ca, File: file, dir: dir}
}

// Options of one certificate.
type Options struct {
	// NotBefore, NotAfter: the validity (default: an hour ago to a day from now).
	NotBefore, NotAfter time.Time
}

// Expired is the validity of a certificate that expired an hour ago.
func Expired() Options {
	now := time.Now()
	return Options{NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)}
}

// Files writes a certificate of role named name (valid for localhost, 127.0.0.1 and ::1) and
// its key into a new temporary directory and returns the three files.
func (c *CA) Files(t testing.TB, role security.Role, name string, opts ...Options) security.Files {
	t.Helper()
	dir := t.TempDir()
	f := security.Files{CA: c.File, Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	c.Write(t, f, role, name, opts...)
	return f
}

// Write (re)writes f's certificate and key with a new certificate of role named name,
// replacing the files (write to a temporary name, then rename, as a careful deployment does).
func (c *CA) Write(t testing.TB, f security.Files, role security.Role, name string, opts ...Options) {
	t.Helper()
	now := time.Now()
	o := Options{NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)}
	if len(opts) > 0 {
		o = opts[0]
	}
	certPEM, keyPEM, err := c.Issue(security.CertRequest{
		Role: role, Name: name, DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore: o.NotBefore, NotAfter: o.NotAfter,
	})
	if err != nil {
		t.Fatal(err)
	}
	replace(t, f.Key, keyPEM, 0o600)
	replace(t, f.Cert, certPEM, 0o644)
}

func replace(t testing.TB, path string, data []byte, perm os.FileMode) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TLS loads a new certificate of role named name.
func (c *CA) TLS(t testing.TB, role security.Role, name string, opts ...Options) *security.TLS {
	t.Helper()
	return Load(t, c.Files(t, role, name, opts...))
}

// Load loads f, failing t on an error. An expired certificate loads (the peer refuses it).
func Load(t testing.TB, f security.Files) *security.TLS {
	t.Helper()
	s, err := security.Load(f, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
