//go:build linux

package proccluster

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// parentEnv makes the test binary, started again by TestNodesDieWithTheirParent, play the
// harness's process: it starts a node, prints its pid and waits for its stdin to close.
const parentEnv = "PROCCLUSTER_TEST_PARENT_DIR"

// TestNodesDieWithTheirParent: a process that started a node through the harness is killed
// with SIGKILL (as a test binary that go test -timeout ends is, without its cleanups); the
// node, in a process group of its own, dies with it.
func TestNodesDieWithTheirParent(t *testing.T) {
	if dir := os.Getenv(parentEnv); dir != "" {
		beParent(t, dir)
		return
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestNodesDieWithTheirParent$", "-test.count=1", "-test.timeout=2m")
	parent.Env = append(os.Environ(), parentEnv+"="+t.TempDir())
	stdin, err := parent.StdinPipe() // never written: its end tells the parent to exit
	if err != nil {
		t.Fatal(err)
	}
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	parent.Stderr = os.Stderr
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = parent.Process.Kill(); _ = parent.Wait() })

	pids := make(chan int, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			var pid int
			if _, err := fmt.Sscanf(s.Text(), "node pid %d", &pid); err == nil {
				pids <- pid
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	var pid int
	select {
	case pid = <-pids:
	case <-time.After(30 * time.Second):
		t.Fatal("the parent did not name its node within 30s")
	}
	// Were the node to survive, it is not left behind.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if state := procState(pid); state == "" || state == "Z" {
		t.Fatalf("node %d is not running before its parent is killed (state %q)", pid, state)
	}

	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		state := procState(pid)
		if state == "" || state == "Z" {
			return // gone, or dead and waiting for init to reap it
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d outlived its parent by 10s; last seen in state %q", pid, state)
		}
		<-time.After(10 * time.Millisecond)
	}
}

// beParent starts a sleeper node, prints its pid and waits until stdin closes.
func beParent(t *testing.T, dir string) {
	c, err := New("jmnode", []Node{{Name: "tm1", Role: TaskManager, LogPath: filepath.Join(dir, "tm1.log"),
		Wrap: []string{"sh", "-c", "exec sleep 60"}}})
	if err != nil {
		t.Fatal(err)
	}
	p := c.TMs[0]
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("node pid %d\n", p.Pid())
	_, _ = io.Copy(io.Discard, os.Stdin)
	p.Stop(5 * time.Second)
}

// procState is the state letter of process pid in /proc (R, S, Z, ...), "" when there is none.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) state ...: comm may hold spaces, so read after its closing parenthesis.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return ""
}
