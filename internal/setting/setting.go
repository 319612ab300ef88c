// Package setting is the shape of a refused configuration value, shared by every package's
// Config.Validate: the field, the value and the rule it breaks. The library reports the Go
// field; jmnode renames it to the flag that sets it (Named), so one rule serves both and a
// process refuses a bad flag at start naming the flag, the value and the allowed range.
package setting

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Error is one refused value: Field (a config field, e.g. "Slots", or a flag once Named),
// Value as given, and Rule, what the value must be ("must be in [1, 1024]"). Kind is the
// package's sentinel (taskmanager.ErrInvalidConfig, ...), so errors.Is keeps working.
type Error struct {
	Field string
	Value string
	Rule  string
	Kind  error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s %s: %s", e.Field, e.Value, e.Rule)
	if e.Kind != nil {
		return e.Kind.Error() + ": " + s
	}
	return s
}

func (e *Error) Unwrap() error { return e.Kind }

// New is a refusal of field's value v (formatted with %v; a string is quoted).
func New(kind error, field string, v any, rule string, args ...any) *Error {
	return &Error{Field: field, Value: Format(v), Rule: fmt.Sprintf(rule, args...), Kind: kind}
}

// Format prints a value as a refusal shows it: strings quoted, the rest with %v.
func Format(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// Named renames the field of a refusal with names (config field -> flag, e.g. "Slots" ->
// "--slots") and drops the package's prefix: "--slots 1025: must be in [1, 1024]". Any other
// error, or a field names does not hold, is returned as it is.
func Named(err error, names map[string]string) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	n, ok := names[e.Field]
	if !ok {
		return err
	}
	return &Error{Field: n, Value: e.Value, Rule: e.Rule}
}

// Within puts a refusal's field inside section ("Slots" -> "TM.Slots"), keeping its kind: the
// refusal of a package's Config that a larger configuration holds as a field (agent's
// JobMasterConfig.JobMaster, ...). Any other error is returned as it is.
func Within(err error, section string) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	return &Error{Field: section + "." + e.Field, Value: e.Value, Rule: e.Rule, Kind: e.Kind}
}

// NonNegative refuses a negative duration.
func NonNegative(kind error, field string, d time.Duration) error {
	if d < 0 {
		return New(kind, field, d, "must not be negative")
	}
	return nil
}

// HostPort checks that addr is host:port with a numeric port in [minPort, 65535] (minPort 0
// allows "pick a free port"). The host is not resolved.
func HostPort(kind error, field, addr string, minPort int) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return New(kind, field, addr, "must be host:port (%v)", unwrapAddr(err))
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < minPort || p > 65535 {
		return New(kind, field, addr, "must be host:port with a port in [%d, 65535]", minPort)
	}
	return nil
}

// unwrapAddr is the reason of net's address error without the address repeated.
func unwrapAddr(err error) string {
	var ae *net.AddrError
	if errors.As(err, &ae) {
		return ae.Err
	}
	return err.Error()
}
