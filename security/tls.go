package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Files names the PEM files a process's TLS is read from (--tls-ca, --tls-cert, --tls-key).
type Files struct {
	// CA: the certificate(s) of the CA every peer's certificate must chain to.
	CA string
	// Cert, Key: this process's certificate (with its role) and private key.
	Cert, Key string
}

// Set reports whether any file is named; Validate whether all are.
func (f Files) Set() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Validate: all three files or none; or, for a client that authenticates with a bearer token,
// the CA alone (ClientOnly).
func (f Files) Validate() error {
	if f.Set() && (f.CA == "" || (f.Cert == "") != (f.Key == "")) {
		return errors.New("--tls-ca, --tls-cert and --tls-key go together: set all three, none, or (a client with a bearer token) --tls-ca alone")
	}
	return nil
}

// ClientOnly reports whether f names a CA and no certificate: a client that verifies the
// server and authenticates with a bearer token.
func (f Files) ClientOnly() bool { return f.CA != "" && f.Cert == "" && f.Key == "" }

// TLS is one process's mutual TLS: its certificate and the CA, read from Files and read again
// whenever one of the files changes on disk (its modification time or size), so a certificate
// or CA can be replaced without a restart: connections opened after the change use the new
// files, open ones keep theirs. A change that does not load (a half-written file, a key that
// does not match the certificate) is logged and the previous files stay in use.
type TLS struct {
	files Files
	log   hclog.Logger

	mu     sync.Mutex
	stamps [3]stamp
	cert   *tls.Certificate
	pool   *x509.CertPool
	self   Identity
	expiry time.Time
}

type stamp struct {
	mod  time.Time
	size int64
}

// Load reads f, which must hold a certificate with a role that chains to the CA.
func Load(f Files, log hclog.Logger) (*TLS, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if !f.Set() {
		return nil, errors.New("no TLS files named")
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	t := &TLS{files: f, log: log.Named("tls")}
	st, err := t.stat()
	if err != nil {
		return nil, err
	}
	if err := t.load(st); err != nil {
		return nil, err
	}
	return t, nil
}

// Identity is this process's own identity (its certificate's name and role).
func (t *TLS) Identity() Identity {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.self
}

// Files are the files t reads.
func (t *TLS) Files() Files { return t.files }

func (t *TLS) stat() ([3]stamp, error) {
	var out [3]stamp
	for i, p := range []string{t.files.CA, t.files.Cert, t.files.Key} {
		if p == "" {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			return out, fmt.Errorf("tls: %w", err)
		}
		out[i] = stamp{mod: fi.ModTime(), size: fi.Size()}
	}
	return out, nil
}

// load reads the files; t.mu is held or t is not shared yet.
func (t *TLS) load(st [3]stamp) error {
	caPEM, err := os.ReadFile(t.files.CA)
	if err != nil {
		return fmt.Errorf("tls: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("tls: CA %s: no PEM certificate in it", t.files.CA)
	}
	if t.files.ClientOnly() {
		t.cert, t.pool, t.stamps = &tls.Certificate{}, pool, st
		return nil
	}
	cert, err := tls.LoadX509KeyPair(t.files.Cert, t.files.Key)
	if err != nil {
		return fmt.Errorf("tls: certificate %s, key %s: %w", t.files.Cert, t.files.Key, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("tls: certificate %s: %w", t.files.Cert, err)
		}
	}
	id, err := IdentityOf(leaf)
	if err != nil {
		return fmt.Errorf("tls: certificate %s: %w", t.files.Cert, err)
	}
	// The chain is checked at a moment the certificate is valid: an expired certificate loads
	// (with a loud line), so that the refusal is the peers', as when it expires while running.
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, CurrentTime: leaf.NotBefore.Add(time.Second)}); err != nil {
		return fmt.Errorf("tls: certificate %s does not verify against CA %s: %w", t.files.Cert, t.files.CA, err)
	}
	if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		t.log.Error("this process's certificate is not valid now: every peer will refuse it", "cert", t.files.Cert, "not_before", leaf.NotBefore.UTC().Format(time.RFC3339), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	t.cert, t.pool, t.self, t.expiry, t.stamps = &cert, pool, id, leaf.NotAfter, st
	return nil
}

// current returns the certificate and CA pool, reading the files again first when one of them
// changed since they were last read.
func (t *TLS) current() (*tls.Certificate, *x509.CertPool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, err := t.stat()
	if err == nil && st != t.stamps {
		old := t.self
		if err = t.load(st); err == nil {
			t.log.Info("reloaded the certificate and CA from disk", "name", t.self.Name, "role", t.self.Role, "was", old.Name, "expires", t.expiry.UTC().Format(time.RFC3339))
		}
	}
	if err != nil {
		t.log.Warn("TLS files changed but do not load; still using the previous ones", "error", err)
		// Do not try again until the files change once more.
		if st != ([3]stamp{}) {
			t.stamps = st
		}
	}
	return t.cert, t.pool
}

// ServerConfig is the tls.Config of a server: it presents the current certificate, requires a
// client certificate, and accepts only one that chains to the current CA, is valid now, is
// meant for client authentication and names one of allowed (nil: any role).
func (t *TLS) ServerConfig(allowed ...Role) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Verified in VerifyConnection against the CA as it is on disk now (ClientCAs would be
		// fixed when the config is built).
		ClientAuth: tls.RequireAnyClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, _ := t.current()
			return c, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return t.verify(cs, x509.ExtKeyUsageClientAuth, "", allowed)
		},
	}
}

// ServerConfigOptionalClient is ServerConfig for a server that also admits a client without a
// certificate (it must then authenticate otherwise: a bearer token on the JobMaster's gRPC
// server, on HTTP). A certificate a client does present is verified as ServerConfig does.
func (t *TLS) ServerConfigOptionalClient(allowed ...Role) *tls.Config {
	c := t.ServerConfig(allowed...)
	c.ClientAuth = tls.RequestClientCert
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return nil
		}
		return t.verify(cs, x509.ExtKeyUsageClientAuth, "", allowed)
	}
	return c
}

// ClientConfig is the tls.Config of a client: it presents the current certificate and accepts
// a server only with a certificate that chains to the current CA, is valid now, is meant for
// server authentication, names the host dialled (the handshake's ServerName: gRPC sets it from
// the address) and names one of want (nil: any role).
func (t *TLS) ClientConfig(want ...Role) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain, the host name and the role are verified in VerifyConnection against the
		// CA as it is on disk now; RootCAs would be fixed when the config is built.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, _ := t.current()
			return c, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return t.verify(cs, x509.ExtKeyUsageServerAuth, cs.ServerName, want)
		},
	}
}

// ErrRefused wraps every refusal of a peer's certificate.
var ErrRefused = errors.New("peer certificate refused")

func (t *TLS) verify(cs tls.ConnectionState, usage x509.ExtKeyUsage, host string, allowed []Role) error {
	err := t.verifyPeer(cs.PeerCertificates, usage, host, allowed)
	if err != nil {
		side := "client"
		if usage == x509.ExtKeyUsageServerAuth {
			side = "server"
		}
		t.log.Warn("refused a TLS peer", "peer", side, "error", err)
	}
	return err
}

// VerifyPeer checks a peer's certificate chain (leaf first) as the configs do.
func (t *TLS) verifyPeer(certs []*x509.Certificate, usage x509.ExtKeyUsage, host string, allowed []Role) error {
	if len(certs) == 0 {
		return fmt.Errorf("%w: the peer sent no certificate", ErrRefused)
	}
	_, pool := t.current()
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	leaf := certs[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Errorf("%w: CN %q: %v", ErrRefused, leaf.Subject.CommonName, err)
	}
	if host != "" {
		if err := leaf.VerifyHostname(host); err != nil {
			return fmt.Errorf("%w: CN %q: %v", ErrRefused, leaf.Subject.CommonName, err)
		}
	}
	id, err := IdentityOf(leaf)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if len(allowed) > 0 && !slices.Contains(allowed, id.Role) {
		return fmt.Errorf("%w: %s may not connect here (roles admitted: %s)", ErrRefused, id, roleList(allowed))
	}
	return nil
}
