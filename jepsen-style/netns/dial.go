package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// NamedNSDir is where `ip netns` keeps its bind-mounted namespace handles.
const NamedNSDir = "/var/run/netns"

// Dialer returns a dial function whose sockets are created inside namespace ns: the calling
// goroutine locks its OS thread, enters ns with setns(2), dials, and returns to the original
// namespace. A socket stays in the namespace it was created in, so the connection lives there
// while the rest of the process stays in the host namespace. If the way back fails the thread
// is left locked, and the Go runtime discards it when the goroutine ends.
//
// The address must be a literal IP:port (no DNS), so the dial runs in the calling goroutine.
func Dialer(ns string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		target, err := os.Open(filepath.Join(NamedNSDir, ns))
		if err != nil {
			return nil, fmt.Errorf("netns: open %s: %w", ns, err)
		}
		defer target.Close()

		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			return nil, fmt.Errorf("netns: own namespace: %w", err)
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			return nil, fmt.Errorf("netns: enter %s: %w", ns, err)
		}
		var d net.Dialer
		conn, dialErr := d.DialContext(ctx, "tcp4", addr)
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Keep the thread locked: it dies with this goroutine instead of serving others
			// from the wrong namespace.
			if conn != nil {
				conn.Close()
			}
			return nil, fmt.Errorf("netns: leave %s: %w", ns, err)
		}
		runtime.UnlockOSThread()
		return conn, dialErr
	}
}
