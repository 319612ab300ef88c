package main

import (
	"errors"

	"github.com/jmcluster/jmcluster/security"

	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The operator CLI's connection to a JobMaster, shared by every command: job.go (job submit,
// list, cancel), status.go (job status), cluster.go (status), raft.go (raft, members).

// cliFlags are shared by every operator command.
type cliFlags struct {
	addr    *string
	json    *bool
	timeout *time.Duration
	maxMsg  *int
	tls     tlsFlags
	token   *string
}

func newCLIFlags(fs *flag.FlagSet, read bool) cliFlags {
	def := os.Getenv("JMNODE_ADDR")
	if def == "" {
		def = "127.0.0.1:7100"
	}
	c := cliFlags{
		addr:    fs.String("addr", def, "gRPC address of any JobMaster (env JMNODE_ADDR)"),
		timeout: fs.Duration("timeout", 15*time.Second, "give up after this long (retries while there is no leader, it reconciles or this client is over its write rate limit)"),
		maxMsg:  fs.Int("max-message-size", transport.DefaultMaxMessageSize, "bound in bytes on every gRPC message this client sends or receives (the JobMasters have their own)"),
	}
	c.tls = newTLSFlags(fs, "this client's operator or reader")
	c.token = fs.String("token-file", "", "file holding this client's bearer token (operator or reader; instead of --tls-cert and --tls-key, with --tls-ca)")
	if read {
		c.json = fs.Bool("json", false, "print JSON")
	} else {
		c.json = new(bool)
	}
	return c
}

type conn struct {
	addr string
	cc   *grpc.ClientConn
}

// dial connects to a JobMaster; every message is bounded by maxMsg (0: the default), and a
// message over that limit or the JobMaster's is refused with an error naming the limit.
// With sec the connection is (mutual) TLS and the server must present a jobmaster
// certificate; with a token secret every call carries it.
func dial(addr string, maxMsg int, sec *security.TLS, token ...string) (*conn, error) {
	opts := append([]grpc.DialOption{transport.DialCredentials(sec, security.RoleJobMaster)},
		transport.DialOptions(maxMsg, "jmnode client")...)
	for _, t := range token {
		opts = append(opts, transport.TokenCredentials(t))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("JobMaster address %q: %w", addr, err)
	}
	return &conn{addr: addr, cc: cc}, nil
}

// dial connects to the JobMaster the flags name, with mutual TLS when the --tls-* flags say.
// Its --max-message-size is held to the processes' range: below the floor the JobMasters' pages
// and chunks would be refused; the ceiling stays clear of protobuf's bound on one message.
func (cf cliFlags) dial() (*conn, error) {
	if err := messageSize(*cf.maxMsg); err != nil {
		return nil, err
	}
	sec, err := cf.tls.load(nil)
	if err != nil {
		return nil, err
	}
	if *cf.token == "" {
		return dial(*cf.addr, *cf.maxMsg, sec)
	}
	if sec == nil {
		return nil, errors.New("--token-file needs --tls-ca: a bearer token travels over TLS only")
	}
	secret, err := readSecret(*cf.token)
	if err != nil {
		return nil, err
	}
	return dial(*cf.addr, *cf.maxMsg, sec, secret)
}

// dialAs dials addr with the flags' credentials and limits (a node another answer named).
func dialAs(cf cliFlags, addr string) (*conn, error) {
	cf.addr = &addr
	return cf.dial()
}

// askOnce makes one call on c, bounded by 5 s, without retries.
func askOnce[T any](c *conn, rpc func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rpc(ctx)
	if err != nil {
		return resp, c.explain(err)
	}
	return resp, nil
}

func (c *conn) client() pb.ClientServiceClient     { return pb.NewClientServiceClient(c.cc) }
func (c *conn) operator() pb.OperatorServiceClient { return pb.NewOperatorServiceClient(c.cc) }

// call runs fn, retrying while the cluster has no leader, the call reached a follower that
// could not forward, the leader is reconciling, or this client is over its write rate limit
// (after the RetryInfo delay), until the timeout. Errors name the address.
func (c *conn) call(timeout time.Duration, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	delay := 100 * time.Millisecond
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(actx)
		acancel()
		if err == nil {
			return nil
		}
		st, _ := status.FromError(err)
		retry := st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded || transport.IsRateLimited(err)
		if !retry || ctx.Err() != nil {
			return c.explain(err)
		}
		if d, ok := transport.RetryAfter(err); ok {
			delay = d
		}
		select {
		case <-ctx.Done():
			return c.explain(err)
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
}

func (c *conn) explain(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch {
	case st.Code() == codes.Unavailable && transport.Reason(err) == "":
		return fmt.Errorf("cannot reach JobMaster at %s: %s", c.addr, st.Message())
	case st.Code() == codes.DeadlineExceeded:
		return fmt.Errorf("JobMaster at %s did not answer in time: %s", c.addr, st.Message())
	}
	return fmt.Errorf("%s (%s, from %s)", st.Message(), st.Code(), c.addr)
}

// ask dials the JobMaster the flags name and makes one call with the CLI's retries.
func ask[T any](cf cliFlags, rpc func(context.Context, *conn) (T, error)) (T, error) {
	var resp T
	c, err := cf.dial()
	if err != nil {
		return resp, err
	}
	defer c.cc.Close()
	err = c.call(*cf.timeout, func(ctx context.Context) error {
		var err error
		resp, err = rpc(ctx, c)
		return err
	})
	return resp, err
}

func printJSON(m proto.Message) error {
	b, err := protojson.MarshalOptions{Indent: "  ", UseProtoNames: true}.Marshal(m)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
