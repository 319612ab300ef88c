package operator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/natstest"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// secretsOf is an Info.Secret over the credentials of m.
func secretsOf(m map[string][]byte) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		if b, ok := m[name]; ok {
			return b, nil
		}
		return nil, fmt.Errorf("credential %q: no such file", name)
	}
}

// readNats runs a nats_source of op with info until it emitted n records.
func readNats(t *testing.T, op *pb.Operator, info Info, n int) ([]Record, error) {
	t.Helper()
	info.Parallelism = 1
	src, err := NewSource(op, info)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []Record
	err = src.Run(ctx, func(r Record) error {
		out = append(out, r)
		if len(out) == n {
			return errNatsStop
		}
		return nil
	})
	if errors.Is(err, errNatsStop) {
		err = nil
	}
	return out, err
}

// TestNatsCredentialsOfSourceAndSink: against a server in operator mode, a sink and a source
// connect with a .creds credential (parsed from its bytes) and a user of an account the server
// does not know is refused with the server's answer; against a server with a user, the source
// connects with user:password. No error holds a credential's content.
func TestNatsCredentialsOfSourceAndSink(t *testing.T) {
	s, creds := natstest.StartOperator(t)
	s.CreateStream(t, "OUT", "out")
	stranger := natstest.UserCreds(t, nil)
	secrets := map[string][]byte{"app": creds, "stranger": stranger, "broken": []byte("-----BEGIN NATS USER JWT-----\nnot a jwt\n")}
	info := Info{Job: "j", Vertex: "v", Secret: secretsOf(secrets)}

	op := natsSinkOp(s.URL, "OUT", "out")
	op.GetNatsSink().Credential = "app"
	o := openNatsSink(t, op, info)
	o.write(t, 0, 3)
	if err := o.Finish(nil); err != nil {
		t.Fatal(err)
	}
	checkStream(t, s, "OUT", 3)
	src := natsOp(s.URL, "OUT", "")
	src.GetNatsSource().Credential = "app"
	if out, err := readNats(t, src, info, 3); err != nil || string(out[2].Value) != "v2" {
		t.Fatalf("a source with a .creds credential: %v, records %v", err, out)
	}

	for _, c := range []struct{ cred, want string }{
		{"stranger", "Authorization Violation"},
		{"broken", "nats_sink: connect to " + s.URL},
	} {
		op.GetNatsSink().Credential = c.cred
		_, err := openNatsSinkErr(t, op, info)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("credential %s: error %v, want it to hold %q", c.cred, err, c.want)
		}
		t.Logf("credential %s: %v", c.cred, err)
		for _, line := range bytes.Split(secrets[c.cred], []byte("\n")) {
			if len(line) > 8 && !bytes.HasPrefix(line, []byte("-----")) && strings.Contains(err.Error(), string(line)) {
				t.Fatalf("credential %s: the error %q holds a line of its content", c.cred, err)
			}
		}
	}

	ps := natstest.StartWith(t, natstest.Auth{User: "reader", Password: "pw:with-colon"})
	ps.CreateStream(t, "IN", "in")
	ps.Publish(t, "in", []byte("x"), nil)
	secrets["reader"] = []byte("reader:pw:with-colon\r\n")
	src = natsOp(ps.URL, "IN", "")
	src.GetNatsSource().Credential = "reader"
	if out, err := readNats(t, src, info, 1); err != nil || string(out[0].Value) != "x" {
		t.Fatalf("a source with user:password: %v, records %v", err, out)
	}
	src.GetNatsSource().Credential = ""
	if _, err := readNats(t, src, info, 1); err == nil || !strings.Contains(err.Error(), "nats_source: connect to "+ps.URL) || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Fatalf("a source without its credential: %v", err)
	}
}
