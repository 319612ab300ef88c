package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CPU quotas for the throttle faults: a node's process is moved into a cgroup of its own,
// named with the run's marker (jmc-<run>-<node>), whose CPU quota is a share of one core.
// Version 1 (this kernel's, mounted at /sys/fs/cgroup/cpu) takes cpu.cfs_period_us and
// cpu.cfs_quota_us; version 2 (the unified hierarchy at /sys/fs/cgroup) takes cpu.max "QUOTA
// PERIOD" once the root's cgroup.subtree_control enables the cpu controller. Releasing moves
// the processes back to the root and removes the directory; Clean removes every marked
// directory a crashed run left (its processes back to the root first).

// CgroupPeriodUs is the period of every quota the suite sets: 100 ms, the kernel's default.
const CgroupPeriodUs = 100000

// CgroupStep is one operation on the cgroup filesystem: "mkdir" or "rmdir" of Path, or "write"
// of Value into the file Path.
type CgroupStep struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value string `json:"value,omitempty"`
}

func (s CgroupStep) String() string {
	if s.Op == "write" {
		return fmt.Sprintf("echo %s > %s", s.Value, s.Path)
	}
	return s.Op + " " + s.Path
}

// Cgroups is the CPU controller's hierarchy: where it is mounted and which version it is.
type Cgroups struct {
	Root string
	V2   bool
}

// ErrNoCPUCgroup: neither a version 1 cpu hierarchy nor a version 2 one with the cpu controller.
var ErrNoCPUCgroup = errors.New("netns: no cgroup CPU controller (neither /sys/fs/cgroup/cpu/cpu.cfs_quota_us nor cpu in /sys/fs/cgroup/cgroup.controllers)")

// DetectCgroups finds the CPU controller: version 1 at /sys/fs/cgroup/cpu when it has quotas,
// else version 2 at /sys/fs/cgroup when its root offers the cpu controller.
func DetectCgroups() (Cgroups, error) {
	v1 := "/sys/fs/cgroup/cpu"
	if _, err := os.Stat(filepath.Join(v1, "cpu.cfs_quota_us")); err == nil {
		return Cgroups{Root: v1}, nil
	}
	v2 := "/sys/fs/cgroup"
	if b, err := os.ReadFile(filepath.Join(v2, "cgroup.controllers")); err == nil && hasWord(string(b), "cpu") {
		return Cgroups{Root: v2, V2: true}, nil
	}
	return Cgroups{}, ErrNoCPUCgroup
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// ThrottleSteps puts pid into the cgroup name with a quota of quotaUs per CgroupPeriodUs.
func (c Cgroups) ThrottleSteps(name string, pid, quotaUs int) []CgroupStep {
	dir := filepath.Join(c.Root, name)
	if c.V2 {
		return []CgroupStep{
			{Op: "write", Path: filepath.Join(c.Root, "cgroup.subtree_control"), Value: "+cpu"},
			{Op: "mkdir", Path: dir},
			{Op: "write", Path: filepath.Join(dir, "cpu.max"), Value: fmt.Sprintf("%d %d", quotaUs, CgroupPeriodUs)},
			{Op: "write", Path: filepath.Join(dir, "cgroup.procs"), Value: strconv.Itoa(pid)},
		}
	}
	return []CgroupStep{
		{Op: "mkdir", Path: dir},
		{Op: "write", Path: filepath.Join(dir, "cpu.cfs_period_us"), Value: strconv.Itoa(CgroupPeriodUs)},
		{Op: "write", Path: filepath.Join(dir, "cpu.cfs_quota_us"), Value: strconv.Itoa(quotaUs)},
		{Op: "write", Path: filepath.Join(dir, "cgroup.procs"), Value: strconv.Itoa(pid)},
	}
}

// ReleaseSteps moves pids (the processes the cgroup name holds) back to the root and removes it.
func (c Cgroups) ReleaseSteps(name string, pids []int) []CgroupStep {
	var out []CgroupStep
	for _, pid := range pids {
		out = append(out, CgroupStep{Op: "write", Path: filepath.Join(c.Root, "cgroup.procs"), Value: strconv.Itoa(pid)})
	}
	return append(out, CgroupStep{Op: "rmdir", Path: filepath.Join(c.Root, name)})
}

// RunCgroupSteps carries the steps out in order and stops at the first that fails, naming it.
func RunCgroupSteps(steps []CgroupStep) error {
	for _, s := range steps {
		var err error
		switch s.Op {
		case "mkdir":
			err = os.Mkdir(s.Path, 0o755)
			if errors.Is(err, os.ErrExist) {
				err = nil
			}
		case "rmdir":
			err = os.Remove(s.Path)
			if errors.Is(err, os.ErrNotExist) {
				err = nil
			}
		case "write":
			err = os.WriteFile(s.Path, []byte(s.Value), 0o644)
		default:
			err = fmt.Errorf("unknown operation %q", s.Op)
		}
		if err != nil {
			return fmt.Errorf("netns: cgroup step %q: %w", s.String(), err)
		}
	}
	return nil
}

// Throttle moves pid into the cgroup name (created if needed) with a quota of quotaUs per
// CgroupPeriodUs.
func (c Cgroups) Throttle(name string, pid, quotaUs int) error {
	if pid <= 0 {
		return fmt.Errorf("netns: throttle %s: no process", name)
	}
	return RunCgroupSteps(c.ThrottleSteps(name, pid, quotaUs))
}

// Release moves every process of the cgroup name back to the root and removes it; a cgroup
// that does not exist is nothing to do.
func (c Cgroups) Release(name string) error {
	b, err := os.ReadFile(filepath.Join(c.Root, name, "cgroup.procs"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("netns: release %s: %w", name, err)
	}
	return RunCgroupSteps(c.ReleaseSteps(name, parsePids(string(b))))
}

func parsePids(s string) []int {
	var out []int
	for _, f := range strings.Fields(s) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// CleanCgroups releases every cgroup whose name starts with marker (a crashed run's); no CPU
// controller means nothing to clean.
func CleanCgroups(marker string) error {
	c, err := DetectCgroups()
	if err != nil {
		return nil
	}
	entries, err := os.ReadDir(c.Root)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), marker) {
			errs = append(errs, c.Release(e.Name()))
		}
	}
	return errors.Join(errs...)
}
