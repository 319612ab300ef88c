// Package freeport finds ports for processes that bind them later: the process tests' and the
// demos' JobMasters, TaskManagers and servers, whose addresses are chosen before they start.
//
// A port the kernel hands out for ":0" lies in its ephemeral range, the same range every
// outgoing connection on the machine takes its source port from: between the choice and the
// child's bind, a connection of any process (with tests of several packages running at once,
// thousands a second) can take it, and the child fails with "address already in use". The
// ports here are chosen below that range (ip_local_port_range), where no source port is ever
// taken, at random so that test binaries running at once rarely draw the same one, and each
// is checked free for TCP and UDP (memberlist binds both on one port number).
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the lowest port handed out: above the well-known and most registered services.
const lowest = 10000

// handedOut are the ports Ports returned in this process. A node stopped by one test and
// started again later binds its ports again: meanwhile they are free, and a test running in
// parallel must not be given one of them.
var (
	handedOutMu sync.Mutex
	handedOut   = map[int]bool{}
)

// ephemeralRange is the file that holds the kernel's range of source ports.
const ephemeralRange = "/proc/sys/net/ipv4/ip_local_port_range"

// Ports returns n distinct ports of host, free for TCP and UDP when chosen and below the
// kernel's ephemeral range, and none this process was given before while others are free.
// Where the range leaves too little room below it (or cannot be read
// on this system), the ports come from ":0" as before.
func Ports(host string, n int) ([]int, error) {
	top := ephemeralLow()
	if top-lowest < 64*n {
		return fromKernel(host, n)
	}
	var held []func()
	defer func() {
		for _, release := range held {
			release()
		}
	}()
	handedOutMu.Lock()
	defer handedOutMu.Unlock()
	out := make([]int, 0, n)
	span := top - lowest
	start := rand.IntN(span)
	// The first pass skips the ports this process handed out before; the second takes them
	// too, should the others be busy (the ports of this call are held: none is taken twice).
	for pass := 0; pass < 2 && len(out) < n; pass++ {
		for i := 0; i < span && len(out) < n; i++ {
			port := lowest + (start+i*7919)%span // a stride prime to any span: every port once
			if pass == 0 && handedOut[port] {
				continue
			}
			release, err := hold(host, port)
			if err != nil {
				continue
			}
			held = append(held, release)
			out = append(out, port)
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("freeport: %d free ports of %s between %d and %d, wanted %d", len(out), host, lowest, top, n)
	}
	for _, p := range out {
		handedOut[p] = true
	}
	return out, nil
}

// Addrs is Ports as "host:port" addresses.
func Addrs(host string, n int) ([]string, error) {
	ports, err := Ports(host, n)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = net.JoinHostPort(host, strconv.Itoa(p))
	}
	return out, nil
}

// hold binds port for TCP and UDP; release frees both.
func hold(host string, port int) (release func(), err error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	tl, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ul, err := net.ListenPacket("udp", addr)
	if err != nil {
		_ = tl.Close()
		return nil, err
	}
	return func() { _ = tl.Close(); _ = ul.Close() }, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when it cannot be read:
// Linux's default; 49152 on other systems is above it too).
func ephemeralLow() int {
	b, err := os.ReadFile(ephemeralRange)
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 0 {
		return 32768
	}
	return lo
}

// fromKernel is the fallback: n ports from ":0", each checked for UDP too.
func fromKernel(host string, n int) ([]int, error) {
	var held []func()
	defer func() {
		for _, release := range held {
			release()
		}
	}()
	out := make([]int, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries > 20*n {
			return nil, errors.New("freeport: no port free for both TCP and UDP")
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("freeport: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		release, err := hold(host, port)
		if err != nil {
			continue
		}
		held = append(held, release)
		out = append(out, port)
	}
	return out, nil
}
