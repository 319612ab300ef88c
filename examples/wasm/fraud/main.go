//go:build wasip1

// Command fraud is a user function (docs/user-functions.md): a keyed PROCESS function over
// payments, JSON values {"user": ..., "amount": n} keyed by user (json_key_by), in event time.
// Per user it keeps the event times of its recent amounts over a threshold; when count of them
// fall within window_ms it emits an alert, {"user":...,"amounts":count,"first_ms":...,
// "last_ms":...}, keyed by the user, and forgets them. A timer idle_ms after a user's last
// large amount clears the user's state.
//
// Configuration (all optional): {"threshold": 90, "count": 3, "window_ms": 60000,
// "idle_ms": 300000}.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o bin/fraud.wasm ./examples/wasm/fraud
package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jmcluster/jmcluster/sdk/fn"
)

var cfg = struct {
	Threshold int64 `json:"threshold"`
	Count     int   `json:"count"`
	WindowMs  int64 `json:"window_ms"`
	IdleMs    int64 `json:"idle_ms"`
}{Threshold: 90, Count: 3, WindowMs: 60_000, IdleMs: 300_000}

func init() {
	fn.HandleInit(func(config []byte) error {
		if len(config) > 0 {
			if err := json.Unmarshal(config, &cfg); err != nil {
				return fmt.Errorf("config: %w", err)
			}
		}
		if cfg.Count < 1 || cfg.WindowMs < 1 || cfg.IdleMs < 1 {
			return fmt.Errorf("config: count %d, window_ms %d and idle_ms %d must be positive", cfg.Count, cfg.WindowMs, cfg.IdleMs)
		}
		return nil
	})
	fn.HandleTimer(func(t fn.Record, _ *fn.Output) error {
		t.ClearState() // the user was idle: its times are forgotten
		return nil
	})
}

type payment struct {
	User   string `json:"user"`
	Amount int64  `json:"amount"`
}

// The state of a user: its large amounts' event times, 8 bytes each (little-endian), in
// order of time, then the time of its idle timer.
func decodeTimes(b []byte) (times []int64, timer int64) {
	if len(b) < 8 {
		return nil, fn.NoTimestamp
	}
	for i := 0; i+8 < len(b); i += 8 {
		times = append(times, int64(binary.LittleEndian.Uint64(b[i:])))
	}
	return times, int64(binary.LittleEndian.Uint64(b[len(b)-8:]))
}

func encodeTimes(times []int64, timer int64) []byte {
	b := make([]byte, 0, 8*len(times)+8)
	for _, t := range times {
		b = binary.LittleEndian.AppendUint64(b, uint64(t))
	}
	return binary.LittleEndian.AppendUint64(b, uint64(timer))
}

// detect is the function the job spec names.
//
//go:wasmexport detect
func detect(n uint32) uint32 {
	return fn.Process(n, func(r fn.Record, out *fn.Output) error {
		var p payment
		if err := json.Unmarshal(r.Value, &p); err != nil {
			return fmt.Errorf("record of key %q: value %q is not a payment: %w", r.Key, r.Value, err)
		}
		if p.Amount <= cfg.Threshold || r.Time == fn.NoTimestamp {
			return nil
		}
		st, _ := r.State()
		times, timer := decodeTimes(st)
		times = append(times, r.Time)
		slices.Sort(times) // out of order records
		// Keep the times within window_ms of the newest.
		newest := times[len(times)-1]
		times = slices.DeleteFunc(times, func(t int64) bool { return t <= newest-cfg.WindowMs })
		if timer != fn.NoTimestamp {
			r.DeleteTimer(timer)
		}
		if len(times) >= cfg.Count {
			alert, _ := json.Marshal(map[string]any{"user": p.User, "amounts": len(times), "first_ms": times[0], "last_ms": newest})
			out.Emit(r.Key, alert, newest)
			r.ClearState()
			return nil
		}
		timer = newest + cfg.IdleMs
		r.RegisterTimer(timer)
		r.SetState(encodeTimes(times, timer))
		return nil
	})
}

func main() {}
