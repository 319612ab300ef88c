package main

import (
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"

	"github.com/hashicorp/go-hclog"
)

// pprofRates are the mutex and block profile rates set when --pprof-addr is given: one event
// in this many is sampled (1/5 mutex contentions; blocking events of 10µs and longer).
const (
	pprofMutexFraction = 5
	pprofBlockRateNs   = 10_000
	// pprofMemRate: one allocation sampled per this many bytes, an eighth of Go's default, so
	// that a heap profile resolves structures of a few hundred kilobytes.
	pprofMemRate = 64 << 10
)

// servePprof serves net/http/pprof on addr (a loopback address is expected: the profiles show
// the process's internals). An empty addr does nothing. The listener lives as long as the
// process.
func servePprof(addr string, log hclog.Logger) error {
	if addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return errors.New("--pprof-addr: " + err.Error())
	}
	runtime.SetMutexProfileFraction(pprofMutexFraction)
	runtime.SetBlockProfileRate(pprofBlockRateNs)
	runtime.MemProfileRate = pprofMemRate
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	log.Info("pprof listening", "addr", l.Addr().String())
	go func() { _ = http.Serve(l, mux) }()
	return nil
}
