package natstest

import (
	"net"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// StartOperator starts a server in operator mode (decentralized JWT auth: an operator, one
// account with JetStream, users signed by the account) and connects a client as a user of the
// account; both stop when t ends. It returns the server and the .creds file of that user (its
// JWT and NKey seed, as nsc writes it).
func StartOperator(t testing.TB) (*Server, []byte) {
	t.Helper()
	okp := must(t, nkeys.CreateOperator)
	opk := must(t, okp.PublicKey)
	oc := jwt.NewOperatorClaims(opk)
	oc.Name = "test-operator"
	skp := must(t, nkeys.CreateAccount) // the system account JetStream needs
	spk := must(t, skp.PublicKey)
	oc.SystemAccount = spk
	if _, err := oc.Encode(okp); err != nil {
		t.Fatal(err)
	}
	sc := jwt.NewAccountClaims(spk)
	sc.Name = "SYS"
	sjwt, err := sc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	akp := must(t, nkeys.CreateAccount)
	apk := must(t, akp.PublicKey)
	ac := jwt.NewAccountClaims(apk)
	ac.Name = "test-account"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	ajwt, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	for pk, j := range map[string]string{spk: sjwt, apk: ajwt} {
		if err := resolver.Store(pk, j); err != nil {
			t.Fatal(err)
		}
	}
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		TrustedOperators: []*jwt.OperatorClaims{oc}, AccountResolver: resolver, SystemAccount: spk}
	s := run(t, opts)
	opts.Port = s.Addr().(*net.TCPAddr).Port
	creds := UserCreds(t, akp)
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.UserCredentialBytes(creds))
	if err != nil {
		t.Fatalf("connect to %s: %v", s.ClientURL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &Server{URL: s.ClientURL(), S: s, NC: nc, JS: js, opts: opts}, creds
}

// UserCreds returns the .creds file of a new user signed by account (nil: a new account the
// server does not know, whose users it refuses).
func UserCreds(t testing.TB, account nkeys.KeyPair) []byte {
	t.Helper()
	if account == nil {
		account = must(t, nkeys.CreateAccount)
	}
	ukp := must(t, nkeys.CreateUser)
	uc := jwt.NewUserClaims(must(t, ukp.PublicKey))
	ujwt, err := uc.Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(ujwt, must(t, ukp.Seed))
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

func must[T any](t testing.TB, f func() (T, error)) T {
	t.Helper()
	v, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
