package jepsen

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/client"
	"github.com/jmcluster/jmcluster/jepsen-style/history"
	"github.com/jmcluster/jmcluster/jepsen-style/netns"
	"github.com/jmcluster/jmcluster/jepsen-style/report"
)

// StallDir is where a run's goroutine dumps go, inside the run's directory.
const StallDir = "stalls"

// dumpTimeout bounds one JM's goroutine dump (a paused process never answers).
const dumpTimeout = 5 * time.Second

// stallWatch runs the stall detector (client.StallDetector) on every round of the monitor and,
// when the leader stalls, takes goroutine dumps of every JM (net/http/pprof, which the harness
// starts every JM with on PortPprof) into <run>/stalls/, records the stall for the report and
// goes on. Dumps are taken in a goroutine of their own, so the monitor keeps polling.
type stallWatch struct {
	det  *client.StallDetector
	rec  *history.Recorder
	dir  string   // the run's directory
	jms  []string // the JMs to dump
	dump func(ctx context.Context, node string) ([]byte, error)
	logf func(format string, args ...any)

	mu     sync.Mutex
	closed bool
	stalls []report.Stall
	rounds int // dump rounds taken (numbers the files)
	wg     sync.WaitGroup
}

// newStallWatch watches the run's leader; dump reads one JM's goroutines.
func (r *run) newStallWatch(rec *history.Recorder) *stallWatch {
	return &stallWatch{det: client.NewStallDetector(client.StallConfig{}), rec: rec, dir: r.dir, jms: JMs(),
		dump: r.dumpGoroutines, logf: r.cfg.Progress}
}

// observe is the monitor's OnRound.
func (w *stallWatch) observe(at time.Time, round []client.Observation) {
	act, v := w.det.Observe(client.StallSample{Time: at, Round: round, OpenOps: w.rec.Open()})
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	switch act {
	case client.StallDump:
		last := len(w.stalls) - 1
		if last < 0 || !w.stalls[last].End.IsZero() || w.stalls[last].EndedBy != "" {
			w.stalls = append(w.stalls, report.Stall{Leader: v.Leader, Epoch: v.Epoch, Commit: v.Commit, Applied: v.Applied,
				Since: v.Since, Detected: at, OpenOps: w.rec.Open(), LeaderAnswered: v.Answered, Seen: round})
			last++
			w.logf("stall: leader %s (epoch %d) has committed nothing since %s (%s; commit %d, applied %d) while %d client operations wait; goroutine dumps of every JM into %s/",
				v.Leader, v.Epoch, v.Since.Format("15:04:05.000"), at.Sub(v.Since).Round(time.Millisecond), v.Commit, v.Applied, w.stalls[last].OpenOps, StallDir)
		} else {
			w.logf("stall: leader %s still stalled (%s); dumping every JM again", v.Leader, at.Sub(v.Since).Round(time.Millisecond))
		}
		w.rounds++
		round, idx := w.rounds, last
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			files, errs := w.dumpAll(round)
			w.mu.Lock()
			defer w.mu.Unlock()
			w.stalls[idx].Dumps = append(w.stalls[idx].Dumps, files...)
			w.stalls[idx].Errors = append(w.stalls[idx].Errors, errs...)
		}()
	case client.StallEnd:
		last := len(w.stalls) - 1
		if last < 0 || w.stalls[last].EndedBy != "" {
			return
		}
		s := &w.stalls[last]
		s.End, s.EndedBy = at, "progress"
		if v.Leader != s.Leader || v.Epoch != s.Epoch {
			s.EndedBy = "leader changed"
		}
		w.logf("stall: over after %s (%s; leader %s, commit %d, applied %d)", at.Sub(s.Since).Round(time.Millisecond), s.EndedBy, v.Leader, v.Commit, v.Applied)
	}
}

// dumpAll dumps every JM concurrently into <run>/stalls/dump<round>-<node>.goroutines.txt and
// returns the files written (relative to the run directory) and the failures.
func (w *stallWatch) dumpAll(round int) (files, errs []string) {
	if err := os.MkdirAll(filepath.Join(w.dir, StallDir), 0o755); err != nil {
		return nil, []string{err.Error()}
	}
	type out struct {
		file, err string
	}
	res := make([]out, len(w.jms))
	var wg sync.WaitGroup
	for i, n := range w.jms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), dumpTimeout)
			defer cancel()
			b, err := w.dump(ctx, n)
			if err != nil {
				res[i].err = fmt.Sprintf("dump %d of %s: %v", round, n, err)
				return
			}
			rel := filepath.Join(StallDir, fmt.Sprintf("dump%d-%s.goroutines.txt", round, n))
			if err := os.WriteFile(filepath.Join(w.dir, rel), b, 0o644); err != nil {
				res[i].err = err.Error()
				return
			}
			res[i].file = rel
		}()
	}
	wg.Wait()
	for _, r := range res {
		if r.file != "" {
			files = append(files, r.file)
		}
		if r.err != "" {
			errs = append(errs, r.err)
		}
	}
	return files, errs
}

// close waits for the dumps in flight, ends a stall still open ("run ended") and returns every
// stall seen; later rounds are ignored.
func (w *stallWatch) close() []report.Stall {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.stalls); n > 0 && w.stalls[n-1].EndedBy == "" {
		w.stalls[n-1].EndedBy = "run ended"
	}
	return append([]report.Stall{}, w.stalls...)
}

// dumpGoroutines reads a JM's goroutines with their full stacks and wait times
// (/debug/pprof/goroutine?debug=2), from inside the JM's own namespace: the nemesis's DROP rules
// and delays name other nodes' addresses, so a cut or delayed JM can still be dumped. SIGQUIT
// would dump too, but kills the process.
func (r *run) dumpGoroutines(ctx context.Context, node string) ([]byte, error) {
	dial := netns.Dialer(r.topo.NS(node))
	tr := &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return dial(ctx, addr) }}
	defer tr.CloseIdleConnections()
	url := fmt.Sprintf("http://%s:%d/debug/pprof/goroutine?debug=2", r.topo.IP(node), PortPprof)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}
