package membership

import (
	"fmt"
	"net"
	"strconv"
)

// freePort returns a port on host that is free for both TCP and UDP at the
// time of the call: memberlist binds both on one port number, and a port the
// kernel hands out for TCP may be taken for UDP. The port is released before
// returning, so a caller still retries if someone else takes it meanwhile.
func freePort(host string) (int, error) {
	var lastErr error
	for range 20 {
		tl, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, fmt.Errorf("find free port: %w", err)
		}
		port := tl.Addr().(*net.TCPAddr).Port
		ul, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(port)))
		_ = tl.Close()
		if err != nil {
			lastErr = err
			continue
		}
		_ = ul.Close()
		return port, nil
	}
	return 0, fmt.Errorf("find free port on %q: %w", host, lastErr)
}
