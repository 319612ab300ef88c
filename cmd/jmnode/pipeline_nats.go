package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jmcluster/jmcluster/internal/pipelinecheck"
	"github.com/jmcluster/jmcluster/internal/proccluster"
)

// natsProc is the NATS server of demo-pipeline: a nats-server process with JetStream, its store
// and log under the demo's directory, on a free loopback port, with two users: the
// pipeline's (its password a credential in the TaskManagers' --secrets-dir) and the demo's own
// (publishing the clicks, reading the results).
type natsProc struct {
	cmd      *exec.Cmd
	url      string
	user, pw string // the pipeline's
	adminPW  string
	nc       *nats.Conn // the demo's connection
	js       jetstream.JetStream
}

// findNatsServer is --nats-server, else nats-server beside this binary (`make demo-pipeline`
// builds bin/nats-server from the module github.com/nats-io/nats-server/v2), else on PATH.
func findNatsServer(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "nats-server"); isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	return "", errors.New("no nats-server beside jmnode or on PATH: `make bin/nats-server` builds it from the Go module (or apt-get install nats-server), or name one with --nats-server")
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// startNats writes the server's configuration under dir and starts it; the server dies with
// this process.
func startNats(ctx context.Context, bin, dir string) (*natsProc, error) {
	ports, err := proccluster.FreePorts(1)
	if err != nil {
		return nil, err
	}
	n := &natsProc{url: "nats://" + ports[0], user: "clicks", pw: randomSecret(), adminPW: randomSecret()}
	store := filepath.Join(dir, "nats")
	if err := os.MkdirAll(store, 0o700); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`listen: %q
jetstream { store_dir: %q }
authorization {
  users = [
    {user: %q, password: %q}
    {user: "demo", password: %q}
  ]
}
`, ports[0], store, n.user, n.pw, n.adminPW)
	confPath := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	n.cmd = exec.Command(bin, "-c", confPath)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		n.nc, err = nats.Connect(n.url, nats.UserInfo("demo", n.adminPW), nats.MaxReconnects(-1))
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			n.stop()
			return nil, fmt.Errorf("nats-server at %s did not accept connections within 20s (last: %v; log %s)", n.url, err, logf.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n.js, err = jetstream.New(n.nc); err != nil {
		n.stop()
		return nil, err
	}
	return n, nil
}

// credential is the pipeline's credential file: "user:password".
func (n *natsProc) credential() []byte { return []byte(n.user + ":" + n.pw + "\n") }

// createStream creates stream over subjects (memory would do; a file store is what users run).
func (n *natsProc) createStream(ctx context.Context, stream string, subjects ...string) error {
	_, err := n.js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: subjects, Duplicates: 10 * time.Minute})
	return err
}

func (n *natsProc) stop() {
	if n.nc != nil {
		n.nc.Close()
	}
	if n.cmd != nil && n.cmd.Process != nil {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = n.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = n.cmd.Process.Kill()
			<-done
		}
	}
}

// readTotals reads every message of the stream TOTALS: the window results by user and minute,
// and what is wrong beyond them (a message without its id, or two of one id).
func (n *natsProc) readTotals(ctx context.Context) (map[pipelinecheck.WindowKey][]pipelinecheck.Total, []string, error) {
	msgs, err := pipelinecheck.ReadStream(ctx, n.js, "TOTALS", 30*time.Second)
	if err != nil {
		return nil, nil, err
	}
	got := map[pipelinecheck.WindowKey][]pipelinecheck.Total{}
	var extra []string
	ids := map[string]bool{}
	for _, m := range msgs {
		r, err := pipelinecheck.ParseResult(m.Data)
		if err != nil {
			extra = append(extra, err.Error())
			continue
		}
		switch {
		case m.ID == "":
			extra = append(extra, fmt.Sprintf("the result of %s %d has no message id", r.Key, r.Start))
		case ids[m.ID]:
			extra = append(extra, fmt.Sprintf("message id %s twice", m.ID))
		}
		ids[m.ID] = true
		key := pipelinecheck.WindowKey{User: r.Key, Start: r.Start}
		got[key] = append(got[key], pipelinecheck.Total{Count: r.Count, Sum: r.Sum})
	}
	return got, extra, nil
}
