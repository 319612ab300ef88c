package jobmaster

import "fmt"

// The JobMaster-TaskManager protocol versions this JobMaster supports. 1: builds before the
// version was sent (their registrations carry none); 2: TaskManagers with the Exchange data
// plane, which also read producers of protocol 1 (a stream per channel), so a cluster can run
// TaskManagers of both while they are upgraded one at a time; 3: TaskManagers that take shared
// channel lists in SubmitTasks (SharedChannelsProtocol); 4: TaskManagers whose records are
// bytes with event time and watermarks (BytesRecordsProtocol), which send a TaskManager of an
// earlier protocol the numeric records it reads and refuse it others, channel by channel
// (dataplane.RecordFormat). docs/operations.md#upgrades.
const (
	MinTMProtocol = 1
	MaxTMProtocol = 4
)

// BytesRecordsProtocol is the first protocol whose TaskManagers carry records of bytes, event
// time and watermarks (docs/task-runtime.md#records).
const BytesRecordsProtocol = 4

// SharedChannelsProtocol is the first protocol whose TaskManagers read the gates of a
// SubmitTasks batch from its shared channel lists; an older one is sent every channel inline.
const SharedChannelsProtocol = 3

// CheckTMProtocol refuses a TaskManager protocol version outside [lo, hi], saying which side
// to upgrade. 0 (a registration without the field) is protocol 1.
func CheckTMProtocol(v, lo, hi uint32) error {
	if v == 0 {
		v = 1
	}
	switch {
	case v < lo:
		return fmt.Errorf("%w: it speaks protocol %d, this JobMaster supports %d-%d: upgrade the TaskManager", ErrIncompatibleTM, v, lo, hi)
	case v > hi:
		return fmt.Errorf("%w: it speaks protocol %d, this JobMaster supports %d-%d: upgrade the JobMasters first", ErrIncompatibleTM, v, lo, hi)
	}
	return nil
}
