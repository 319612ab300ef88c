package jepsen

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/netns"
	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/security"
)

// ClientCertName is the operator certificate the run's clients present in TLS mode.
const ClientCertName = "jepsen"

// credentials are a TLS run's files, made by the harness in <run>/tls: a CA, a certificate per
// node for its role and namespace address, the clients' operator certificate, and a gossip key.
type credentials struct {
	dir       string
	ca        string
	gossipKey string
}

// makeCredentials writes the run's CA, certificates and gossip key (a TLS mode run).
func makeCredentials(runDir string, topo *netns.Topology) (*credentials, error) {
	dir := filepath.Join(runDir, "tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	caCert, caKey, err := security.CreateCA(dir, 2, now) // outlives the certificates (1 day)
	if err != nil {
		return nil, fmt.Errorf("jepsen: tls: %w", err)
	}
	ca, err := security.LoadCA(caCert, caKey)
	if err != nil {
		return nil, fmt.Errorf("jepsen: tls: %w", err)
	}
	issue := func(role security.Role, name string, ips ...net.IP) error {
		if _, _, err := security.CreateCert(ca, dir, security.CertRequest{Role: role, Name: name, IPs: ips}, 1, now); err != nil {
			return fmt.Errorf("jepsen: tls: %s: %w", name, err)
		}
		return nil
	}
	for _, n := range topo.JMs() {
		if err := issue(security.RoleJobMaster, n, net.ParseIP(topo.IP(n))); err != nil {
			return nil, err
		}
	}
	for _, n := range topo.TMs() {
		if err := issue(security.RoleTaskManager, n, net.ParseIP(topo.IP(n))); err != nil {
			return nil, err
		}
	}
	if err := issue(security.RoleOperator, ClientCertName); err != nil {
		return nil, err
	}
	key, err := membership.NewKey()
	if err != nil {
		return nil, err
	}
	return &credentials{dir: dir, ca: caCert, gossipKey: key}, nil
}

// files are the TLS files of a certificate.
func (c *credentials) files(role security.Role, name string) security.Files {
	cert, key := security.CertFiles(role, name)
	return security.Files{CA: c.ca, Cert: filepath.Join(c.dir, cert), Key: filepath.Join(c.dir, key)}
}

// flags are a node's TLS and gossip-key flags.
func (c *credentials) flags(role security.Role, name string) []string {
	f := c.files(role, name)
	return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key, "--gossip-key", c.gossipKey}
}

// client is the clients' operator TLS.
func (c *credentials) client() (*security.TLS, error) {
	return security.Load(c.files(security.RoleOperator, ClientCertName), nil)
}
