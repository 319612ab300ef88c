package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/security"
)

// processFlags are the flags both process commands have with one meaning: logging, profiling,
// TLS and gossip.
type processFlags struct {
	logLevel, logFormat, pprofAddr string
	tls                            tlsFlags
	gossip                         gossipFlags
}

// register registers the shared flags; whose names the certificate in --tls-cert's help and
// keyringDefault where the gossip keyring goes without --gossip-keyring.
func (p *processFlags) register(fs *flag.FlagSet, whose, keyringDefault string) {
	p.gossip.register(fs, keyringDefault)
	fs.StringVar(&p.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.StringVar(&p.logFormat, "log-format", "text", "log format: text, or json (one JSON object per line, for log shippers)")
	fs.StringVar(&p.pprofAddr, "pprof-addr", "", "serve net/http/pprof on this address (empty: off; for profiling only)")
	p.tls = newTLSFlags(fs, whose)
}

// check refuses a shared flag no process can start with (dir: where the gossip keyring goes
// without --gossip-keyring).
func (p *processFlags) check(dir string) error {
	return firstError(optionalAddr("--pprof-addr", p.pprofAddr), p.gossip.check(dir), logFlags(p.logLevel, p.logFormat))
}

// preamble is what both processes do once every flag is checked and before their agent starts:
// the logger (named id), the failpoints, the TLS files (a certificate of role), the PLAINTEXT
// warning without them (what: the connections it is about), and the pprof server.
func (p *processFlags) preamble(id string, role security.Role, what string) (hclog.Logger, *security.TLS, error) {
	log, err := newLogger(id, p.logLevel, p.logFormat)
	if err != nil {
		return nil, nil, err
	}
	if err := setFailpoints(log); err != nil {
		return nil, nil, err
	}
	sec, err := p.tls.load(log, role)
	if err != nil {
		return nil, nil, err
	}
	if sec == nil {
		warnPlaintext(log, what)
	}
	if err := servePprof(p.pprofAddr, log); err != nil {
		return nil, nil, err
	}
	return log, sec, nil
}

// untilSignal blocks until SIGINT or SIGTERM, then logs that the process shuts down.
func untilSignal(log hclog.Logger) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	log.Info("shutting down")
}
