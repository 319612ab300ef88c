//go:build !linux

package proccluster

import "syscall"

// procAttr gives the process a group of its own. Only Linux can have a process die with its
// parent (procattr_linux.go); elsewhere a node outlives a harness that was killed.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
