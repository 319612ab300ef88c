// Package security is jmcluster's mutual TLS: a development certificate authority, certificates
// that carry one role, the files a process reads them from (read again when they change on
// disk), the tls.Configs both processes use on every connection, and the caller's identity
// (name and role) taken from a verified peer certificate.
package security

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Role is what a certificate allows its holder to do; the policy table (transport.Policies)
// names the roles each gRPC method admits.
type Role string

const (
	// RoleJobMaster: a JobMaster replica (Raft voter; calls TaskManagers and other JobMasters).
	RoleJobMaster Role = "jobmaster"
	// RoleTaskManager: a TaskManager (calls the JobMasters' JobMasterService and other
	// TaskManagers' DataService and PeerService).
	RoleTaskManager Role = "taskmanager"
	// RoleOperator: a person or tool that submits and cancels jobs and changes the Raft
	// configuration.
	RoleOperator Role = "operator"
	// RoleReader: a person or tool that only reads (jobs, status, peers, members).
	RoleReader Role = "reader"
)

// Roles lists every role, in the order the documentation shows them.
var Roles = []Role{RoleJobMaster, RoleTaskManager, RoleOperator, RoleReader}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// ParseRole returns the role named s, or an error listing the roles.
func ParseRole(s string) (Role, error) {
	r := Role(strings.ToLower(strings.TrimSpace(s)))
	if !r.Valid() {
		return "", fmt.Errorf("unknown role %q (roles: %s)", s, roleList(Roles))
	}
	return r, nil
}

func roleList(rs []Role) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r)
	}
	return strings.Join(out, ", ")
}

// RoleScheme and roleHost make the URI SAN that carries a certificate's role:
// jmcluster://role/<role>. A URI SAN is an extension the CA signs like any other, Go parses
// it for us (x509.Certificate.URIs), a certificate can carry it beside the DNS and IP SANs
// that hostname verification uses, and a scheme of our own cannot be mistaken for anything an
// organisation's CA puts in a subject (an OU is free text that corporate CAs fill with their
// own departments).
const (
	RoleScheme = "jmcluster"
	roleHost   = "role"
)

// RoleURI is the URI SAN that names role r.
func RoleURI(r Role) *url.URL {
	return &url.URL{Scheme: RoleScheme, Host: roleHost, Path: "/" + string(r)}
}

// ErrNoRole: a certificate without exactly one valid jmcluster role URI.
var ErrNoRole = errors.New("certificate names no jmcluster role")

// RoleOf returns the one role cert's URI SANs name. A certificate with no role URI, with an
// unknown role or with two roles is refused: a certificate means one thing.
func RoleOf(cert *x509.Certificate) (Role, error) {
	var found []Role
	for _, u := range cert.URIs {
		if u.Scheme != RoleScheme || u.Host != roleHost {
			continue
		}
		r := Role(strings.TrimPrefix(u.Path, "/"))
		if !r.Valid() {
			return "", fmt.Errorf("%w: %q is not a role (roles: %s)", ErrNoRole, u.String(), roleList(Roles))
		}
		found = append(found, r)
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("%w (want a URI SAN %s://%s/<role>; CN %q)", ErrNoRole, RoleScheme, roleHost, cert.Subject.CommonName)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("%w: CN %q names %d roles (%s); a certificate carries one", ErrNoRole, cert.Subject.CommonName, len(found), roleList(found))
}

// Identity is a caller as a verified certificate (or, later, a token) names it.
type Identity struct {
	// Name: the certificate's subject common name.
	Name string
	Role Role
	// Via names the JobMaster that forwarded the call for this caller ("" when it came
	// directly).
	Via string
	// Token: the caller authenticated with a bearer token (Tokens), not a certificate.
	Token bool
}

func (id Identity) String() string {
	if id.Name == "" && id.Role == "" {
		return "anonymous"
	}
	kind := string(id.Role)
	if id.Token {
		kind += " token"
	}
	if id.Via != "" {
		return fmt.Sprintf("%s (%s) via %s", id.Name, kind, id.Via)
	}
	return fmt.Sprintf("%s (%s)", id.Name, kind)
}

// IdentityOf is the identity a verified leaf certificate names.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	r, err := RoleOf(cert)
	if err != nil {
		return Identity{}, err
	}
	return Identity{Name: cert.Subject.CommonName, Role: r}, nil
}
