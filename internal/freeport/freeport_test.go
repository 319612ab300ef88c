package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortsBelowTheEphemeralRange: the ports are distinct, below the kernel's source ports,
// and bindable for TCP and UDP once returned.
func TestPortsBelowTheEphemeralRange(t *testing.T) {
	top := ephemeralLow()
	ports, err := Ports("127.0.0.1", 40)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		seen[p] = true
		if top-lowest >= 64*40 && (p < lowest || p >= top) {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, top)
		}
		release, err := hold("127.0.0.1", p)
		if err != nil {
			t.Fatalf("port %d returned free, then: %v", p, err)
		}
		release()
	}
}

// TestPortsSkipABusyPort: a port bound by someone else is never handed out.
func TestPortsSkipABusyPort(t *testing.T) {
	ports, err := Ports("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 200 {
		again, err := Ports("127.0.0.1", 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range again {
			if p == ports[0] {
				t.Fatalf("the busy port %d handed out: %v", p, again)
			}
		}
	}
}

// TestPortsNotHandedOutTwice: a process is not given a port again (a node of a parallel test,
// stopped and started again later, binds it again) while other ports are free.
func TestPortsNotHandedOutTwice(t *testing.T) {
	if top := ephemeralLow(); top-lowest < 64*40 {
		t.Skip("the ports come from the kernel here")
	}
	first, err := Ports("127.0.0.1", 40)
	if err != nil {
		t.Fatal(err)
	}
	given := map[int]bool{}
	for _, p := range first {
		given[p] = true
	}
	for range 50 {
		again, err := Ports("127.0.0.1", 40)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range again {
			if given[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			given[p] = true
		}
	}
}
