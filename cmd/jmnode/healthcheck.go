package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// runHealthcheck is a container's health check (the image is FROM scratch: no curl): one GET
// of a JobMaster's /readyz or a TaskManager's /healthz, exit 0 on 200.
func runHealthcheck(args []string) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	usageFor(fs, "jmnode healthcheck [--url URL]",
		"GETs URL once and succeeds on 200 OK: a container health check (a JobMaster's /readyz: it knows an established leader whose gate is open; a TaskManager's /healthz).")
	url := fs.String("url", "http://127.0.0.1:7200/readyz", "what to GET")
	ca := fs.String("tls-ca", "", "PEM file of the CA an https URL's certificate must chain to (env JMNODE_TLS_CA)")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	client := &http.Client{Timeout: *timeout}
	if strings.HasPrefix(*url, "https://") {
		if *ca == "" {
			return errors.New("an https URL needs --tls-ca")
		}
		pem, err := os.ReadFile(*ca)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s holds no PEM certificate", *ca)
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	resp, err := client.Get(*url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", *url, resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Printf("%s: %s", *url, body)
	return nil
}
