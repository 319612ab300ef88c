package security

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Validity defaults, as Consul's `consul tls` chose them: a CA for five years, a certificate
// for one.
const (
	DefaultCADays   = 5 * 365
	DefaultCertDays = 365
	// CAFile and CAKeyFile are the names `jmnode tls ca create` writes.
	CAFile    = "jmcluster-ca.pem"
	CAKeyFile = "jmcluster-ca-key.pem"
	// clockSkew: a new certificate is valid from a little before now, so a peer whose clock is
	// slightly behind accepts it at once.
	clockSkew = time.Minute
)

// CertFiles are the names `jmnode tls cert create` writes for a role and name.
func CertFiles(r Role, name string) (cert, key string) {
	return fmt.Sprintf("%s-%s.pem", r, name), fmt.Sprintf("%s-%s-key.pem", r, name)
}

// CA is a certificate authority that issues role certificates.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is Cert, PEM-encoded (what --tls-ca files hold).
	CertPEM []byte
}

// NewCA makes a self-signed CA (ECDSA P-256) named cn, valid from notBefore to notAfter.
func NewCA(cn string, notBefore, notAfter time.Time) (*CA, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"jmcluster"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, keyPEM, nil
}

// LoadCA reads a CA certificate and its key (PEM files, as `jmnode tls ca create` writes).
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("CA certificate %s: no PEM CERTIFICATE block", certFile)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate %s: %w", certFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("CA certificate %s: not a CA certificate", certFile)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("CA key %s: no PEM block", keyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA key %s: %w", keyFile, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA key %s: not a signing key", keyFile)
	}
	return &CA{Cert: cert, Key: signer, CertPEM: certPEM}, nil
}

// CertRequest is what a role certificate says.
type CertRequest struct {
	Role Role
	// Name is the subject common name: the identity audit lines and refusals show.
	Name string
	DNS  []string
	IPs  []net.IP
	// NotBefore, NotAfter: the validity.
	NotBefore, NotAfter time.Time
}

// Issue signs a certificate for r (ECDSA P-256 key) usable both as a TLS server and a TLS
// client certificate: every jmcluster process is both. It returns the certificate and key
// PEM-encoded.
func (ca *CA) Issue(r CertRequest) (certPEM, keyPEM []byte, err error) {
	if !r.Role.Valid() {
		return nil, nil, fmt.Errorf("unknown role %q (roles: %s)", r.Role, roleList(Roles))
	}
	if r.Name == "" {
		return nil, nil, errors.New("a certificate needs a name (its common name)")
	}
	if !r.NotAfter.After(r.NotBefore) {
		return nil, nil, fmt.Errorf("validity: NotAfter %s is not after NotBefore %s", r.NotAfter, r.NotBefore)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: r.Name, Organization: []string{"jmcluster"}},
		NotBefore:    r.NotBefore,
		NotAfter:     r.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     r.DNS,
		IPAddresses:  r.IPs,
		URIs:         []*url.URL{RoleURI(r.Role)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, err
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func encodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// CreateCA writes a new CA into dir (CAFile, CAKeyFile: the key readable by its owner only),
// valid for days from now. It refuses to overwrite either file.
func CreateCA(dir string, days int, now time.Time) (certPath, keyPath string, err error) {
	if days < 1 {
		return "", "", fmt.Errorf("--days %d: a CA must be valid for at least 1 day", days)
	}
	certPath, keyPath = filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	if err := refuseExisting(certPath, keyPath); err != nil {
		return "", "", err
	}
	ca, keyPEM, err := NewCA("jmcluster CA", now.Add(-clockSkew), now.Add(time.Duration(days)*24*time.Hour))
	if err != nil {
		return "", "", err
	}
	if err := writeNew(keyPath, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := writeNew(certPath, ca.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// CreateCert writes a certificate for r signed by ca into dir (CertFiles names), valid for
// days from now (r's NotBefore and NotAfter are set here). It refuses to overwrite a file.
func CreateCert(ca *CA, dir string, r CertRequest, days int, now time.Time) (certPath, keyPath string, err error) {
	if days < 1 {
		return "", "", fmt.Errorf("--days %d: a certificate must be valid for at least 1 day", days)
	}
	if !r.Role.Valid() {
		return "", "", fmt.Errorf("unknown role %q (roles: %s)", r.Role, roleList(Roles))
	}
	if r.Name == "" || filepath.Base(r.Name) != r.Name {
		return "", "", fmt.Errorf("--name %q: a certificate needs a name that is also a file name (no slash)", r.Name)
	}
	cf, kf := CertFiles(r.Role, r.Name)
	certPath, keyPath = filepath.Join(dir, cf), filepath.Join(dir, kf)
	if err := refuseExisting(certPath, keyPath); err != nil {
		return "", "", err
	}
	r.NotBefore, r.NotAfter = now.Add(-clockSkew), now.Add(time.Duration(days)*24*time.Hour)
	if r.NotAfter.After(ca.Cert.NotAfter) {
		return "", "", fmt.Errorf("--days %d: the certificate would outlive its CA (valid until %s)", days, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	certPEM, keyPEM, err := ca.Issue(r)
	if err != nil {
		return "", "", err
	}
	if err := writeNew(keyPath, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := writeNew(certPath, certPEM, 0o644); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

func refuseExisting(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%s exists: refusing to overwrite it (remove it or choose another --dir)", p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// writeNew creates path (failing if it exists) with data and perm.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
