package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrCommand wraps the failure of an external command (ip, iptables, tc).
var ErrCommand = errors.New("netns: command failed")

// IP runs `ip ARGS...` and returns its combined output.
func IP(ctx context.Context, args ...string) (string, error) {
	return run(ctx, "ip", args...)
}

// Exec runs a command inside namespace ns (`ip netns exec NS NAME ARGS...`).
func Exec(ctx context.Context, ns, name string, args ...string) (string, error) {
	return run(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

func run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%w: %s %s: %v: %s", ErrCommand, name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// Setup builds the run's namespaces, bridge and veth pairs. On failure it removes what it made.
func (t *Topology) Setup(ctx context.Context) error {
	for _, c := range t.SetupCommands() {
		if _, err := IP(ctx, c...); err != nil {
			_ = Clean(context.Background(), t.RunID)
			return err
		}
	}
	return nil
}

// Teardown kills what still runs in the run's namespaces and deletes them.
func (t *Topology) Teardown(ctx context.Context) error { return Clean(ctx, t.RunID) }

// List returns the names of every named network namespace.
func List(ctx context.Context) ([]string, error) {
	out, err := IP(ctx, "netns", "list")
	if err != nil {
		return nil, err
	}
	return parseList(out), nil
}

// parseList reads `ip netns list` output: one "name" or "name (id: N)" per line.
func parseList(out string) []string {
	var names []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

// Clean removes a run's leftovers, or every run's when runID is "": it kills (SIGKILL) every
// process inside a matching namespace and every process whose command line carries the marker,
// then deletes the namespaces. It returns the first error but always tries everything.
func Clean(ctx context.Context, runID string) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	names, err := List(ctx)
	keep(err)
	owned := RunNamespaces(names, runID)
	for _, ns := range owned {
		out, err := IP(ctx, "netns", "pids", ns)
		keep(err)
		for _, f := range strings.Fields(out) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	marker := Prefix
	if runID != "" {
		marker = Prefix + runID + "-"
	}
	for _, pid := range MarkedPIDs(marker) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Data disks (tmpfs) of the run's JMs, mounted at a path carrying the marker.
	for _, mp := range MarkedMounts(marker) {
		keep(syscall.Unmount(mp, syscall.MNT_DETACH))
	}
	// CPU cgroups of throttled nodes (cgroup.go), named with the marker.
	keep(CleanCgroups(marker))
	// Namespaces are deleted last so no process is left holding one anonymously.
	for i := len(owned) - 1; i >= 0; i-- {
		_, err := IP(ctx, "netns", "del", owned[i])
		keep(err)
	}
	return first
}

// MarkedMounts returns the mount points holding a path element that starts with marker.
func MarkedMounts(marker string) []string {
	raw, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.Contains(f[1], "/"+marker) {
			out = append(out, f[1])
		}
	}
	return out
}

// MarkedPIDs returns the pids (never this process's) whose command line holds an argument
// containing "/"+marker or starting with marker.
func MarkedPIDs(marker string) []int {
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if CmdlineHasMarker(raw, marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// CmdlineHasMarker reports whether a NUL-separated command line carries the marker as the
// start of an argument or of a path element (so "jmc-" inside an unrelated word does not count).
func CmdlineHasMarker(cmdline []byte, marker string) bool {
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if strings.HasPrefix(arg, marker) || strings.Contains(arg, "/"+marker) || strings.Contains(arg, "="+marker) {
			return true
		}
	}
	return false
}
