package jepsen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/jmcluster/jmcluster/internal/pgserver"
	"github.com/jmcluster/jmcluster/jepsen-style/netns"
)

// The pipeline's servers live in the run's bridge namespace, on an address of the bridge
// itself (PipelineIP): every node reaches it through its veth, and no nemesis rule names it
// (grudges drop the addresses of nodes, delay and loss hold the packets of a faulty node in
// the other node namespaces; the bridge namespace has neither).
const (
	PipelineIP       = "10.77.0.3"
	PipelineNATSPort = 4222
	PipelinePGPort   = 5432
)

// startInNS starts cmd from a thread inside the network namespace ns, so the process lives
// there (a child inherits its parent thread's namespace). The thread returns to its own
// namespace afterwards; when it cannot, it stays locked and ends with its goroutine.
func startInNS(ns string, cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		target, err := os.Open(filepath.Join(netns.NamedNSDir, ns))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter %s: %w", ns, err)
			return
		}
		startErr := cmd.Start()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(startErr, fmt.Errorf("leave %s: %w", ns, err))
			return // the thread stays locked and dies with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- startErr
	}()
	return <-errc
}

// nsDialer is a nats.CustomDialer whose sockets are made in a namespace.
type nsDialer struct {
	dial func(ctx context.Context, addr string) (net.Conn, error)
}

func (d nsDialer) Dial(_, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return d.dial(ctx, address)
}

// natsServer is the pipeline's nats-server process with JetStream, its store under dir.
type natsServer struct {
	cmd  *exec.Cmd
	done chan struct{}
	url  string
	nc   *nats.Conn
	js   jetstream.JetStream
}

// findNatsServer is path, else nats-server beside jmnode, else on PATH.
func findNatsServer(path, jmnode string) (string, error) {
	if path != "" {
		return filepath.Abs(path)
	}
	if p := filepath.Join(filepath.Dir(jmnode), "nats-server"); isExecutable(p) {
		return p, nil
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("jepsen: the pipeline workload needs nats-server: none beside %s or on PATH (`make bin/nats-server` builds it from the Go module; --nats-server names one; --no-pipeline runs without the workload)", jmnode)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// startNats starts nats-server in namespace ns, listening on PipelineIP, and connects to it.
func startNats(ctx context.Context, bin, ns, dir string) (*natsServer, error) {
	store := filepath.Join(dir, "nats")
	if err := os.MkdirAll(store, 0o755); err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("%s:%d", PipelineIP, PipelineNATSPort)
	conf := fmt.Sprintf("listen: %q\nserver_name: jepsen_pipeline\njetstream { store_dir: %q }\n", addr, store)
	confPath := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s := &natsServer{url: "nats://" + addr, done: make(chan struct{})}
	s.cmd = exec.Command(bin, "-c", confPath)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startInNS(ns, s.cmd); err != nil {
		return nil, fmt.Errorf("jepsen: start %s in %s: %w", bin, ns, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	dial := nsDialer{netns.Dialer(ns)}
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.nc, err = nats.Connect(s.url, nats.SetCustomDialer(dial), nats.MaxReconnects(-1), nats.ReconnectWait(500*time.Millisecond))
		if err == nil {
			break
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("jepsen: nats-server exited at its start (log %s)", logf.Name())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("jepsen: nats-server at %s accepted no connection within 20s (last: %v; log %s)", s.url, err, logf.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *natsServer) createStream(ctx context.Context, name, subjects string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subjects}, Duplicates: 10 * time.Minute})
	if err != nil {
		return fmt.Errorf("jepsen: create stream %s: %w", name, err)
	}
	return nil
}

func (s *natsServer) stop() {
	if s.nc != nil {
		s.nc.Close()
	}
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// startPostgres starts a PostgreSQL server (internal/pgserver) in namespace ns on
// PipelineIP, its cluster under dir, with the user and database pipeline, which the nodes'
// subnet reaches without a password (trust: the TaskManagers of a run hold no credentials;
// the harness connects as the admin, with its password, from PipelineIP),
// and the table the pipeline writes, without a unique key: a window written twice is two rows.
func startPostgres(ctx context.Context, ns, dir string) (*pgserver.Server, error) {
	pgDir := filepath.Join(dir, "pg")
	if err := os.MkdirAll(pgDir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, err
	}
	dial := netns.Dialer(ns)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	srv, err := pgserver.Start(ctx, pgserver.Options{Dir: pgDir, Port: PipelinePGPort, Host: PipelineIP, NoFsync: true, Log: logf,
		HBA: []string{"host " + pipelineDB + " " + pipelineDB + " " + netns.Subnet + " trust",
			"host all all " + netns.Subnet + " scram-sha-256"}, // the harness, from the bridge's own address
		Dial:  func(ctx context.Context, _, addr string) (net.Conn, error) { return dial(ctx, addr) },
		Spawn: func(cmd *exec.Cmd) error { return startInNS(ns, cmd) }})
	if err != nil {
		return nil, fmt.Errorf("jepsen: PostgreSQL for the pipeline: %w", err)
	}
	if err := srv.CreateUserAndDatabase(ctx, pipelineDB, randomHex(), pipelineDB); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	if err := srv.ExecIn(ctx, pipelineDB, `CREATE TABLE `+pipelineTable+` (
		user_id text NOT NULL, window_start bigint NOT NULL, clicks bigint NOT NULL, amount bigint NOT NULL, ordinal bigint NOT NULL);
		ALTER TABLE `+pipelineTable+` OWNER TO `+pipelineDB); err != nil {
		_ = srv.Stop()
		return nil, fmt.Errorf("jepsen: create table %s: %w", pipelineTable, err)
	}
	return srv, nil
}
