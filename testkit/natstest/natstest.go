// Package natstest runs a real NATS server with JetStream inside a test's process: on a random
// port of 127.0.0.1, its store in the test's temporary directory, shut down when the test ends.
package natstest

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is a running NATS server with JetStream and a client connected to it.
type Server struct {
	URL  string
	S    *server.Server
	NC   *nats.Conn
	JS   jetstream.JetStream
	opts *server.Options
}

// Auth is what a server started by StartWith requires of its clients: a user and password,
// or a token (the zero Auth: nothing).
type Auth struct {
	User, Password string
	Token          string
}

// Start starts a server and connects a client to it; both stop when t ends.
func Start(t testing.TB) *Server { return StartWith(t, Auth{}) }

// StartWith starts a server that requires auth of its clients and connects a client with it;
// both stop when t ends.
func StartWith(t testing.TB, auth Auth) *Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Username: auth.User, Password: auth.Password, Authorization: auth.Token}
	s := run(t, opts)
	opts.Port = s.Addr().(*net.TCPAddr).Port // a restart listens where the clients reconnect
	copts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	switch {
	case auth.User != "":
		copts = append(copts, nats.UserInfo(auth.User, auth.Password))
	case auth.Token != "":
		copts = append(copts, nats.Token(auth.Token))
	}
	nc, err := nats.Connect(s.ClientURL(), copts...)
	if err != nil {
		t.Fatalf("connect to %s: %v", s.ClientURL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &Server{URL: s.ClientURL(), S: s, NC: nc, JS: js, opts: opts}
}

// run starts a server of opts, shut down when t ends.
func run(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("nats server at %s not ready for connections after 10s", s.ClientURL())
	}
	return s
}

// Restart shuts the server down and starts it again on the same port and store: its streams
// and messages are kept, and clients reconnect. It returns once the test's client is
// connected again and JetStream answers it.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.S.Shutdown()
	s.S.WaitForShutdown()
	s.S = run(t, s.opts)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := s.JS.AccountInfo(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats server restarted at %s: JetStream does not answer after 30s: %v", s.URL, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CreateStream creates stream over subjects.
func (s *Server) CreateStream(t testing.TB, stream string, subjects ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.JS.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: subjects}); err != nil {
		t.Fatalf("create stream %s: %v", stream, err)
	}
}

// Publish publishes data on subject with headers (nil: none) and waits for the stream's
// acknowledgement; it returns the message's stream sequence.
func (s *Server) Publish(t testing.TB, subject string, data []byte, headers nats.Header) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := s.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data, Header: headers})
	if err != nil {
		t.Fatalf("publish on %s: %v", subject, err)
	}
	return ack.Sequence
}

// Messages returns every message stream holds, in stream order.
func (s *Server) Messages(t testing.TB, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := s.JS.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("stream %s, message %d: %v", stream, seq, err)
		}
		out = append(out, m)
	}
	return out
}
