package netns

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestCgroupStepLists: the file operations of a throttle and its release, on version 1 (this
// kernel's) and version 2, each inside the run's marked directory or the root's procs.
func TestCgroupStepLists(t *testing.T) {
	v1 := Cgroups{Root: "/sys/fs/cgroup/cpu"}
	got := v1.ThrottleSteps("jmc-r1-jm2", 4242, 6500)
	want := []CgroupStep{
		{Op: "mkdir", Path: "/sys/fs/cgroup/cpu/jmc-r1-jm2"},
		{Op: "write", Path: "/sys/fs/cgroup/cpu/jmc-r1-jm2/cpu.cfs_period_us", Value: "100000"},
		{Op: "write", Path: "/sys/fs/cgroup/cpu/jmc-r1-jm2/cpu.cfs_quota_us", Value: "6500"},
		{Op: "write", Path: "/sys/fs/cgroup/cpu/jmc-r1-jm2/cgroup.procs", Value: "4242"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("v1 throttle steps:\n%v\nwant\n%v", got, want)
	}
	got = v1.ReleaseSteps("jmc-r1-jm2", []int{4242, 17})
	want = []CgroupStep{
		{Op: "write", Path: "/sys/fs/cgroup/cpu/cgroup.procs", Value: "4242"},
		{Op: "write", Path: "/sys/fs/cgroup/cpu/cgroup.procs", Value: "17"},
		{Op: "rmdir", Path: "/sys/fs/cgroup/cpu/jmc-r1-jm2"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("v1 release steps:\n%v\nwant\n%v", got, want)
	}
	v2 := Cgroups{Root: "/sys/fs/cgroup", V2: true}
	got = v2.ThrottleSteps("jmc-r1-jm2", 4242, 5000)
	want = []CgroupStep{
		{Op: "write", Path: "/sys/fs/cgroup/cgroup.subtree_control", Value: "+cpu"},
		{Op: "mkdir", Path: "/sys/fs/cgroup/jmc-r1-jm2"},
		{Op: "write", Path: "/sys/fs/cgroup/jmc-r1-jm2/cpu.max", Value: "5000 100000"},
		{Op: "write", Path: "/sys/fs/cgroup/jmc-r1-jm2/cgroup.procs", Value: "4242"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("v2 throttle steps:\n%v\nwant\n%v", got, want)
	}
	if got := v2.ReleaseSteps("jmc-r1-jm2", nil); !reflect.DeepEqual(got, []CgroupStep{{Op: "rmdir", Path: "/sys/fs/cgroup/jmc-r1-jm2"}}) {
		t.Fatalf("v2 release of an empty cgroup: %v", got)
	}
	if s := (CgroupStep{Op: "write", Path: "/x/cpu.max", Value: "5000 100000"}).String(); s != "echo 5000 100000 > /x/cpu.max" {
		t.Fatalf("step text %q", s)
	}
}

// TestCgroupStepsRunOnAFileTree: the steps carried out on an ordinary directory (a stand-in
// for the cgroup filesystem) make and remove the marked directory; a failing step is named.
func TestCgroupStepsRunOnAFileTree(t *testing.T) {
	root := t.TempDir()
	c := Cgroups{Root: root}
	if err := RunCgroupSteps(c.ThrottleSteps("jmc-r1-jm1", 99, 5000)[:3]); err != nil {
		t.Fatal(err)
	}
	if err := RunCgroupSteps([]CgroupStep{{Op: "write", Path: root + "/missing/cpu.max", Value: "1"}}); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
	if err := RunCgroupSteps([]CgroupStep{{Op: "rmdir", Path: root + "/never-made"}}); err != nil {
		t.Fatalf("removing what is not there: %v", err)
	}
}

// TestThrottleAndCleanOnTheHost: as root, on a host with a CPU cgroup, a process throttled into
// a marked cgroup runs under the quota there, and CleanCgroups (what `jepsen clean` runs)
// moves it back to the root and removes the directory, as after a crashed run.
func TestThrottleAndCleanOnTheHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	cg, err := DetectCgroups()
	if err != nil {
		t.Skip(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	marker := fmt.Sprintf("jmc-cgtest%d-", os.Getpid())
	name := marker + "jm1"
	if err := cg.Throttle(name, cmd.Process.Pid, 5000); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(cg.Root, name, "cgroup.procs"))
	if err != nil || !strings.Contains(" "+strings.Join(strings.Fields(string(b)), " ")+" ", fmt.Sprintf(" %d ", cmd.Process.Pid)) {
		t.Fatalf("the process is not in %s: %q (%v)", name, b, err)
	}
	if err := CleanCgroups(marker); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cg.Root, name)); !os.IsNotExist(err) {
		t.Fatalf("%s still there after clean: %v", name, err)
	}
	if err := cg.Release(name); err != nil {
		t.Fatalf("releasing what is gone: %v", err)
	}
}
