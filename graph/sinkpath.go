package graph

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrSinkPathEscapes is wrapped by CheckSinkPath when a sink path is not a clean relative path
// inside the TaskManager's work directory.
var ErrSinkPathEscapes = errors.New("sink path must be a clean relative path inside the TaskManager's work dir")

// SinkPathVars are the values a sink path template expands: {job}, {vertex}, {subtask} and
// {attempt}.
type SinkPathVars struct {
	Job, Vertex string
	Subtask     int32
	Attempt     string
}

// ExpandSinkPath replaces {job}, {vertex}, {subtask} and {attempt} in a sink path template.
// It is the one expansion the TaskManager applies before it opens a sink file.
func ExpandSinkPath(tmpl string, v SinkPathVars) string {
	return strings.NewReplacer(
		"{job}", v.Job,
		"{vertex}", v.Vertex,
		"{subtask}", strconv.Itoa(int(v.Subtask)),
		"{attempt}", v.Attempt,
	).Replace(tmpl)
}

// CheckSinkPath checks a sink path (a template or its expansion): it must be non-empty,
// relative, free of "." and ".." elements, of empty elements and of a trailing slash (the
// form filepath.Clean gives), and without NUL bytes. Such a path names a file inside the
// TaskManager's work directory, as long as no symlink there leads out (the TaskManager checks
// that itself when it opens the file). The error wraps ErrSinkPathEscapes.
func CheckSinkPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: the path is empty", ErrSinkPathEscapes)
	case p == ".":
		return fmt.Errorf("%w: %q names the work dir itself", ErrSinkPathEscapes, p)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%w: %q contains a NUL byte", ErrSinkPathEscapes, p)
	case filepath.IsAbs(p) || strings.HasPrefix(p, "/"):
		return fmt.Errorf("%w: %q is absolute", ErrSinkPathEscapes, p)
	case hasDotDot(p):
		return fmt.Errorf("%w: %q has a \"..\" element", ErrSinkPathEscapes, p)
	case !filepath.IsLocal(p):
		return fmt.Errorf("%w: %q is not local", ErrSinkPathEscapes, p)
	case filepath.Clean(p) != p:
		return fmt.Errorf("%w: %q is not clean (it cleans to %q)", ErrSinkPathEscapes, p, filepath.Clean(p))
	}
	return nil
}

func hasDotDot(p string) bool {
	for _, e := range strings.Split(filepath.ToSlash(p), "/") {
		if e == ".." {
			return true
		}
	}
	return false
}
