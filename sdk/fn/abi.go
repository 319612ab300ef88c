//go:build wasip1

package fn

import (
	"errors"
	"fmt"
	"unsafe"
)

// The host's functions (module jmcluster; wasmhost/DESIGN.md, "ABI").

//go:wasmimport jmcluster output
func hostOutput(ptr unsafe.Pointer, n uint32)

//go:wasmimport jmcluster fail
func hostFail(ptr unsafe.Pointer, n uint32)

//go:wasmimport jmcluster log
func hostLog(ptr unsafe.Pointer, n uint32)

//go:wasmimport jmcluster state_get
func hostStateGet(idx uint32, ptr unsafe.Pointer, capacity uint32) int32

//go:wasmimport jmcluster state_put
func hostStatePut(idx uint32, ptr unsafe.Pointer, n uint32)

//go:wasmimport jmcluster state_delete
func hostStateDelete(idx uint32)

//go:wasmimport jmcluster timer_register
func hostTimerRegister(idx uint32, at int64)

//go:wasmimport jmcluster timer_delete
func hostTimerDelete(idx uint32, at int64)

//go:wasmimport jmcluster watermark
func hostWatermark() int64

// input is the buffer the host writes each call's batch into (jm_alloc).
var input []byte

//go:wasmexport jm_alloc
func jmAlloc(size uint32) uint32 {
	input = make([]byte, size)
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(input))))
}

var (
	initHandler  func(config []byte) error
	timerHandler func(t Record, out *Output) error
	out          = &Output{flush: func(b []byte) { hostOutput(ptr(b), uint32(len(b))) }}
)

// HandleInit registers the handler of the operator's configuration (the spec's wasm.config,
// a JSON document; empty when it sets none). Call it from an init function.
func HandleInit(f func(config []byte) error) { initHandler = f }

// HandleTimer registers the handler of the timers a PROCESS function registers: t.Key is the
// timer's key, t.Time its time; its state calls are for that key. Call it from an init
// function.
func HandleTimer(f func(t Record, out *Output) error) { timerHandler = f }

//go:wasmexport jm_init
func jmInit(n uint32) (st uint32) {
	if initHandler == nil {
		return 0
	}
	defer recoverInto(&st)
	scratch.reset()
	return status(initHandler(append([]byte(nil), input[:n]...)))
}

//go:wasmexport jm_timer
func jmTimer(n uint32) (st uint32) {
	if timerHandler == nil {
		return status(errors.New("a timer fired, but the module registered no timer handler (fn.HandleTimer)"))
	}
	defer recoverInto(&st)
	return finish(out.run(input[:n], &handler{each: timerHandler}))
}

// Map runs f over a batch of n bytes: one record out per record in (MAP). The record f returns
// keeps the input's key, value or time where f leaves them as they were.
func Map(n uint32, f func(r Record) (Record, error)) (st uint32) {
	defer recoverInto(&st)
	return finish(out.run(input[:n], &handler{mapF: f}))
}

// FlatMap runs f over a batch: any number of records out per record in (FLAT_MAP).
func FlatMap(n uint32, f func(r Record, out *Output) error) (st uint32) {
	defer recoverInto(&st)
	return finish(out.run(input[:n], &handler{each: f}))
}

// Filter runs f over a batch: the record when f returns true, else none (FILTER).
func Filter(n uint32, f func(r Record) (bool, error)) (st uint32) {
	defer recoverInto(&st)
	return finish(out.run(input[:n], &handler{filter: f}))
}

// KeyBy runs f over a batch: the record with the key f returns (KEY_BY).
func KeyBy(n uint32, f func(r Record) ([]byte, error)) (st uint32) {
	defer recoverInto(&st)
	return finish(out.run(input[:n], &handler{keyBy: f}))
}

// Process runs f over a batch of a keyed stream: any number of records out, and the record's
// key's state and timers (Record.State, SetState, ClearState, RegisterTimer, DeleteTimer).
func Process(n uint32, f func(r Record, out *Output) error) (st uint32) {
	defer recoverInto(&st)
	return finish(out.run(input[:n], &handler{each: f}))
}

// finish hands the output held to the host and returns the call's status.
func finish(err error) uint32 {
	if err == nil && len(out.buf) > 0 {
		hostOutput(ptr(out.buf), uint32(len(out.buf)))
	}
	return status(err)
}

// recoverInto, deferred by a call's export, turns a panic of a handler into the call's error
// (one defer per call, not per record).
func recoverInto(st *uint32) {
	if p := recover(); p != nil {
		*st = status(fmt.Errorf("panic: %v", p))
	}
}

func status(err error) uint32 {
	if err == nil {
		return 0
	}
	b := []byte(err.Error())
	hostFail(ptr(b), uint32(len(b)))
	return 1
}

func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

var stateBuf = make([]byte, 256)

// State returns the state of the record's key (PROCESS only), and false when it has none. The
// bytes are valid until the next State call.
func (r Record) State() ([]byte, bool) {
	for {
		n := hostStateGet(r.idx, ptr(stateBuf), uint32(len(stateBuf)))
		if n < 0 {
			return nil, false
		}
		if int(n) <= len(stateBuf) {
			return stateBuf[:n], true
		}
		stateBuf = make([]byte, n)
	}
}

// SetState makes v the state of the record's key (PROCESS only).
func (r Record) SetState(v []byte) { hostStatePut(r.idx, ptr(v), uint32(len(v))) }

// ClearState removes the state of the record's key (PROCESS only).
func (r Record) ClearState() { hostStateDelete(r.idx) }

// RegisterTimer registers an event-time timer at time at for the record's key (PROCESS only):
// the timer handler (HandleTimer) is called once the watermark passes it.
func (r Record) RegisterTimer(at int64) { hostTimerRegister(r.idx, at) }

// DeleteTimer removes the record's key's timer at time at (PROCESS only).
func (r Record) DeleteTimer(at int64) { hostTimerDelete(r.idx, at) }

// Watermark is the task's event-time watermark (PROCESS only; NoTimestamp before the first).
func Watermark() int64 { return hostWatermark() }

// Log writes a line to the TaskManager's log, labelled with the module (bounded like
// stderr: wasmhost.MaxLogLineBytes a line).
func Log(format string, args ...any) {
	b := []byte(fmt.Sprintf(format, args...))
	hostLog(ptr(b), uint32(len(b)))
}
