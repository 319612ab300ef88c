package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/jmcluster/jmcluster/security"
)

const tlsUsage = `usage: jmnode tls <ca|cert> create [flags]

Makes the files for mutual TLS (docs/security.md):

  jmnode tls ca create                           a development CA: jmcluster-ca.pem, jmcluster-ca-key.pem
  jmnode tls cert create --role R --name N       a certificate of role R signed by that CA:
                                                 R-N.pem and R-N-key.pem

Roles: jobmaster (JobMaster replicas), taskmanager (TaskManagers), operator (submit, cancel,
Raft changes, everything a reader may), reader (read-only CLI and tools). Files are written to
the current directory or --dir, never over an existing file; keys are readable by their owner
only. Give every process its CA file, certificate and key with --tls-ca, --tls-cert and --tls-key.

Run 'jmnode tls ca create --help' or 'jmnode tls cert create --help' for the flags.
`

func runTLSCACreate(args []string) error {
	fs := flag.NewFlagSet("tls ca create", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: jmnode tls ca create [--dir DIR] [--days N]\n\n"+
			"Writes a new development CA: %s (give it to every process as --tls-ca) and %s (its\n"+
			"private key: keep it off the nodes; it signs certificates). Refuses to overwrite either.\n\nflags:\n",
			security.CAFile, security.CAKeyFile)
		fs.PrintDefaults()
	}
	dir := fs.String("dir", ".", "directory to write the files to")
	days := fs.Int("days", security.DefaultCADays, "days the CA is valid")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("tls ca create: unexpected argument %q", fs.Arg(0))
	}
	cert, key, err := security.CreateCA(*dir, *days, time.Now())
	if err != nil {
		return fmt.Errorf("tls ca create: %w", err)
	}
	fmt.Printf("==> wrote %s\n==> wrote %s\n", cert, key)
	return nil
}

// listFlag is a flag that may be repeated and takes comma-separated values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	*l = append(*l, splitList(v)...)
	return nil
}

func runTLSCertCreate(args []string) error {
	fs := flag.NewFlagSet("tls cert create", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: jmnode tls cert create --role ROLE --name NAME [--dns NAME ...] [--ip ADDR ...] [flags]\n\n"+
			"Writes a certificate and key for one role, signed by the CA: ROLE-NAME.pem and ROLE-NAME-key.pem.\n"+
			"The role is carried as the URI SAN jmcluster://role/ROLE; NAME is the subject common name (what\n"+
			"refusals and audit lines show). Every process is both a TLS server and client, so the certificate\n"+
			"is good for both. Clients check the host they dial against the DNS and IP SANs: list every name and\n"+
			"address other processes use to reach this one (--grpc-advertise, --raft-advertise, --data-advertise).\n"+
			"localhost, 127.0.0.1 and ::1 are always included. Roles: jobmaster, taskmanager, operator, reader.\n\nflags:\n")
		fs.PrintDefaults()
	}
	dir := fs.String("dir", ".", "directory to write the files to")
	role := fs.String("role", "", "the certificate's role: jobmaster, taskmanager, operator or reader (required)")
	name := fs.String("name", "", "the certificate's name (subject common name), e.g. jm1 or alice (required)")
	caFile := fs.String("ca", "", "the CA certificate (default: "+security.CAFile+" in --dir)")
	caKey := fs.String("ca-key", "", "the CA's private key (default: "+security.CAKeyFile+" in --dir)")
	days := fs.Int("days", security.DefaultCertDays, "days the certificate is valid")
	var dns, ips listFlag
	fs.Var(&dns, "dns", "a DNS name the holder is reached at (repeat, or comma-separate)")
	fs.Var(&ips, "ip", "an IP address the holder is reached at (repeat, or comma-separate)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("tls cert create: unexpected argument %q", fs.Arg(0))
	}
	if *role == "" || *name == "" {
		fs.Usage()
		return errors.New("tls cert create: --role and --name are required")
	}
	r, err := security.ParseRole(*role)
	if err != nil {
		return fmt.Errorf("tls cert create: --role: %w", err)
	}
	if *caFile == "" {
		*caFile = filepath.Join(*dir, security.CAFile)
	}
	if *caKey == "" {
		*caKey = filepath.Join(*dir, security.CAKeyFile)
	}
	ca, err := security.LoadCA(*caFile, *caKey)
	if err != nil {
		return fmt.Errorf("tls cert create: %w (make one with jmnode tls ca create, or name it with --ca and --ca-key)", err)
	}
	req := security.CertRequest{Role: r, Name: *name, DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}
	for _, d := range dns {
		if d != "localhost" {
			req.DNS = append(req.DNS, d)
		}
	}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return fmt.Errorf("tls cert create: --ip %q is not an IP address", s)
		}
		req.IPs = append(req.IPs, ip)
	}
	cert, key, err := security.CreateCert(ca, *dir, req, *days, time.Now())
	if err != nil {
		return fmt.Errorf("tls cert create: %w", err)
	}
	fmt.Printf("==> wrote %s\n==> wrote %s\n", cert, key)
	return nil
}
