package taskmanager

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/jmcluster/jmcluster/graph"
)

// MaxSecretBytes bounds a credential's file: a NATS .creds file is under 2 KiB, a password or
// token far less.
const MaxSecretBytes = 64 << 10

// ErrSecret: a task's credential cannot be read (docs/connectors.md#credentials).
var ErrSecret = errors.New("credential")

// secrets reads the credentials a connector names from the directory given at start
// (Config.SecretsDir, --secrets-dir): the file of the credential's name, read through an
// os.Root so a name cannot lead out (graph's validation already refuses a path). A credential
// is read when its task opens, so a rotated file is used from the next task on; its bytes go
// to the operator and nowhere else: no log, report, view or checkpoint holds them, and an
// error names the credential and the directory, never the content.
type secrets struct {
	dir string // "" when the TaskManager has no --secrets-dir
}

// get returns the credential name's bytes.
func (s secrets) get(name string) ([]byte, error) {
	if err := graph.CheckCredentialName(name); err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrSecret, name, err)
	}
	if s.dir == "" {
		return nil, fmt.Errorf("%w %q: this TaskManager was started without --secrets-dir, so it has no credentials", ErrSecret, name)
	}
	root, err := os.OpenRoot(s.dir)
	if err != nil {
		return nil, fmt.Errorf("%w %q: --secrets-dir: %v", ErrSecret, name, err)
	}
	defer root.Close()
	f, err := root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w %q: no such file in --secrets-dir %s", ErrSecret, name, s.dir)
	}
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrSecret, name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSecretBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w %q: read: %v", ErrSecret, name, err)
	case len(b) > MaxSecretBytes:
		return nil, fmt.Errorf("%w %q: its file in --secrets-dir is over MaxSecretBytes %d", ErrSecret, name, MaxSecretBytes)
	case len(b) == 0:
		return nil, fmt.Errorf("%w %q: its file in --secrets-dir is empty", ErrSecret, name)
	}
	return b, nil
}
