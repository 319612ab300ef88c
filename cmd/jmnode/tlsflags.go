package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/security"
)

// tlsFlags are --tls-ca, --tls-cert and --tls-key, shared by both processes and the operator
// CLI (each also JMNODE_TLS_CA, ... or a --config key).
type tlsFlags struct {
	ca, cert, key *string
}

func newTLSFlags(fs *flag.FlagSet, whose string) tlsFlags {
	return tlsFlags{
		ca:   fs.String("tls-ca", "", "PEM file of the CA every peer's certificate must chain to; with --tls-cert and --tls-key turns on mutual TLS (empty: plaintext). Read again when it changes on disk"),
		cert: fs.String("tls-cert", "", "PEM file of "+whose+" certificate (jmnode tls cert create); read again when it changes on disk"),
		key:  fs.String("tls-key", "", "PEM file of the private key of --tls-cert"),
	}
}

func (f tlsFlags) files() security.Files {
	return security.Files{CA: *f.ca, Cert: *f.cert, Key: *f.key}
}

// load returns nil (plaintext) when no file is named, else the process's TLS, whose
// certificate must have one of the roles in want (none: any role).
func (f tlsFlags) load(log hclog.Logger, want ...security.Role) (*security.TLS, error) {
	files := f.files()
	if err := files.Validate(); err != nil {
		return nil, err
	}
	if !files.Set() {
		return nil, nil
	}
	if files.ClientOnly() && len(want) > 0 {
		return nil, errors.New("--tls-cert and --tls-key are required with --tls-ca: a process presents its certificate")
	}
	for _, f := range []struct{ flag, path string }{{"--tls-ca", files.CA}, {"--tls-cert", files.Cert}, {"--tls-key", files.Key}} {
		if f.path == "" {
			continue
		}
		if _, err := os.ReadFile(f.path); err != nil {
			return nil, flagError(f.flag, f.path, "must be a readable PEM file (%v)", pathReason(err))
		}
	}
	sec, err := security.Load(files, log)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca %s, --tls-cert %s, --tls-key %s: %w", files.CA, files.Cert, files.Key, err)
	}
	if id := sec.Identity(); len(want) > 0 && !containsRole(want, id.Role) {
		return nil, fmt.Errorf("--tls-cert %s is a %s certificate (CN %q); this command needs a %s certificate", files.Cert, id.Role, id.Name, want[0])
	}
	return sec, nil
}

func containsRole(rs []security.Role, r security.Role) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// warnPlaintext is the loud line a process without TLS logs at start.
func warnPlaintext(log hclog.Logger, what string) {
	log.Warn("PLAINTEXT: TLS is off; every " + what + " connection is unencrypted and unauthenticated, and any process that reaches a port may call any method (set --tls-ca, --tls-cert and --tls-key; see docs/security.md)")
}

// readSecret reads a bearer token's secret from file (the first line, trimmed).
func readSecret(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	s, _, _ := strings.Cut(string(b), "\n")
	if s = strings.TrimSpace(s); s == "" {
		return "", fmt.Errorf("--token-file %s: empty", file)
	}
	return s, nil
}
