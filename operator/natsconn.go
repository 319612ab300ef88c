package operator

import (
	"bytes"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// natsReconnectWait is how long a NATS connection waits between attempts to reconnect; it
// reconnects without limit (a short server restart delays a task without failing it).
const natsReconnectWait = 2 * time.Second

// natsCredsMarker begins the user JWT of a NATS .creds file.
const natsCredsMarker = "-----BEGIN NATS USER JWT-----"

// natsConnect connects who ("nats_source", "nats_sink") of the task info describes to the
// servers urls, with the credential of that name when it is not empty (docs/connectors.md,
// Credentials). Neither the credential's bytes nor anything of them is logged or put in an
// error: an error names the credential and the servers.
func natsConnect(info Info, urls, credential, who string) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(fmt.Sprintf("jmcluster %s %s/%s[%d]", who, info.Job, info.Vertex, info.Subtask)),
		nats.MaxReconnects(-1), nats.ReconnectWait(natsReconnectWait),
	}
	if credential != "" {
		o, err := natsCredential(info, credential)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", who, err)
		}
		opts = append(opts, o)
	}
	nc, err := nats.Connect(urls, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: connect to %s: %w", who, urls, err)
	}
	return nc, nil
}

// natsCredential is the connection option of the credential name: a .creds file (a user JWT
// and its NKey seed, parsed from the bytes: they are never written anywhere), else its first
// line, user:password when it holds a ':' (split at the first), else a token.
func natsCredential(info Info, name string) (nats.Option, error) {
	if info.Secret == nil {
		return nil, fmt.Errorf("credential %q: this task has no way to read credentials", name)
	}
	b, err := info.Secret(name)
	if err != nil {
		return nil, err // it names the credential (taskmanager/secrets.go)
	}
	if bytes.Contains(b, []byte(natsCredsMarker)) {
		return nats.UserCredentialBytes(b), nil
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) == 0 {
		return nil, fmt.Errorf("credential %q: its first line is empty (want user:password or a token)", name)
	}
	if user, pass, ok := bytes.Cut(line, []byte(":")); ok {
		return nats.UserInfo(string(user), string(pass)), nil
	}
	return nats.Token(string(line)), nil
}
