package graph

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
)

// MaxCredentialNameBytes bounds a connector's credential name.
const MaxCredentialNameBytes = 128

// credentialName is what a credential's name may be: a file name in the TaskManager's
// --secrets-dir, without a path, a leading dot or a character a shell would quote.
var credentialName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// validateCredential checks the name of a credential (docs/connectors.md#credentials); an empty
// name is none. A connector's spec names its credential and never holds it: the TaskManager
// reads it from its --secrets-dir when the task starts, so no secret is in the replicated
// state, a job view or a log.
func validateCredential(field, name string, add addFunc) {
	switch {
	case name == "":
	case len(name) > MaxCredentialNameBytes:
		add(field, "is %d bytes, over MaxCredentialNameBytes %d", len(name), MaxCredentialNameBytes)
	case !credentialName.MatchString(name):
		add(field, "%q is not a credential's name (letters, digits, '.', '_' and '-', not first '.', '_' or '-': a file in the TaskManager's --secrets-dir)", name)
	}
}

// CheckCredentialName returns the problem with a credential's name, or nil.
func CheckCredentialName(name string) error {
	var msg string
	validateCredential("credential", name, func(_, format string, args ...any) { msg = fmt.Sprintf(format, args...) })
	if msg != "" {
		return errors.New(msg)
	}
	return nil
}

// urlErrorCause is what url.Parse's error says without the URL it parsed, which may hold a
// password.
func urlErrorCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
