//go:build linux

package proccluster

import "syscall"

// procAttr gives the process a group of its own and has the kernel kill it (SIGKILL) when its
// parent dies: a test binary ended by go test -timeout, or a demo killed with SIGKILL, leaves
// no node behind. The kernel sends the signal when the OS thread that started the process
// exits, and the Go runtime ends a thread only when a goroutine locked to it
// (runtime.LockOSThread) returns: Start must not be called from such a goroutine.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
