package netdelay

import (
	"fmt"
	"strconv"
	"strings"
)

// ProcFile lists, per namespace, every bound queue and its kernel counters.
const ProcFile = "/proc/net/netfilter/nfnetlink_queue"

// KernelStats are the kernel's counters of one queue, one line of ProcFile.
type KernelStats struct {
	Queue      uint16
	PortID     uint32 // netlink port id of the bound socket
	Held       int    // packets waiting for a verdict
	CopyMode   int
	CopyRange  int
	QueueDrops uint64 // dropped because the queue was full (MaxLen)
	UserDrops  uint64 // dropped because the socket's receive buffer was full
	IDSequence uint32 // last packet id
}

// ParseProc reads ProcFile's text and returns the counters of queue num.
func ParseProc(text string, num uint16) (KernelStats, error) {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return KernelStats{}, fmt.Errorf("netdelay: %s line %q has %d fields, want at least 8", ProcFile, line, len(f))
		}
		var v [8]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return KernelStats{}, fmt.Errorf("netdelay: %s line %q field %d: %w", ProcFile, line, i+1, err)
			}
			v[i] = n
		}
		if v[0] != uint64(num) {
			continue
		}
		return KernelStats{Queue: uint16(v[0]), PortID: uint32(v[1]), Held: int(v[2]), CopyMode: int(v[3]),
			CopyRange: int(v[4]), QueueDrops: v[5], UserDrops: v[6], IDSequence: uint32(v[7])}, nil
	}
	return KernelStats{}, fmt.Errorf("netdelay: queue %d is not bound (%s)", num, ProcFile)
}
