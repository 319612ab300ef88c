package operator

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// Context is what a transform reaches its task through: the records it emits, the value the
// runtime keeps for the current key, and the timers it registers. The current key is the
// key of the record being processed or of the timer firing. Values and timers are the
// runtime's, snapshotted in the checkpoint of a transform registered as keyed (keyedState).
// A Context is used on the task's goroutine only.
type Context struct {
	info Info
	out  Emit
	key  int64

	values map[int64][]byte
	timers map[timer]struct{}
}

// timer is a registered timer: fire at time at for key.
type timer struct {
	key, at int64
}

func newContext(info Info) *Context {
	return &Context{info: info, values: map[int64][]byte{}, timers: map[timer]struct{}{}}
}

// Info describes the task the transform runs in.
func (c *Context) Info() Info { return c.info }

// Emit hands r to the downstream partitions (Emit).
func (c *Context) Emit(r Record) error { return c.out(r) }

// Key is the current key.
func (c *Context) Key() int64 { return c.key }

// Value returns the current key's value, and false when it has none. The bytes stay valid
// until the next SetValue or ClearValue of that key.
func (c *Context) Value() ([]byte, bool) {
	v, ok := c.values[c.key]
	return v, ok
}

// SetValue makes a copy of v the current key's value.
func (c *Context) SetValue(v []byte) {
	c.values[c.key] = append(c.values[c.key][:0], v...)
}

// ClearValue removes the current key's value.
func (c *Context) ClearValue() { delete(c.values, c.key) }

// Int64 returns the current key's value read as an int64 (SetInt64), and false when it has
// none.
func (c *Context) Int64() (int64, bool) {
	v, ok := c.values[c.key]
	if !ok || len(v) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

// SetInt64 makes n the current key's value (8 bytes, big endian).
func (c *Context) SetInt64(n int64) {
	c.values[c.key] = binary.BigEndian.AppendUint64(c.values[c.key][:0], uint64(n))
}

// RegisterTimer registers a timer for the current key at time at; registering it again
// changes nothing.
func (c *Context) RegisterTimer(at int64) { c.timers[timer{c.key, at}] = struct{}{} }

// DeleteTimer removes the current key's timer at time at, if it is registered.
func (c *Context) DeleteTimer(at int64) { delete(c.timers, timer{c.key, at}) }

// advance fires every timer at or before t in order of time then key, and those the handler
// registers at or before t meanwhile; a timer is removed before it fires.
func (c *Context) advance(t int64, h TimerHandler) error {
	for {
		var due []timer
		for tm := range c.timers {
			if tm.at <= t {
				due = append(due, tm)
			}
		}
		if len(due) == 0 {
			return nil
		}
		slices.SortFunc(due, compareTimers)
		for _, tm := range due {
			if _, ok := c.timers[tm]; !ok {
				continue // deleted by an earlier timer's handler
			}
			delete(c.timers, tm)
			if h == nil {
				continue
			}
			c.key = tm.key
			if err := h.OnTimer(c, tm.at); err != nil {
				return fmt.Errorf("timer at %d for key %d: %w", tm.at, tm.key, err)
			}
		}
	}
}

// endOfTime is the time every pending timer fires at when the input ends.
const endOfTime = math.MaxInt64

func compareTimers(a, b timer) int {
	if a.at != b.at {
		if a.at < b.at {
			return -1
		}
		return 1
	}
	switch {
	case a.key < b.key:
		return -1
	case a.key > b.key:
		return 1
	}
	return 0
}

// keyedState is the checkpointed state of a keyed transform: every key's value, in key order,
// and every pending timer, in firing order. A JSON document, like every operator's state.
type keyedState struct {
	Keys   []int64     `json:"keys"`
	Values [][]byte    `json:"values"`
	Timers []timerJSON `json:"timers"`
}

type timerJSON struct {
	Key int64 `json:"key"`
	At  int64 `json:"at"`
}

// snapshot encodes the values and timers.
func (c *Context) snapshot() ([]byte, error) {
	st := keyedState{Keys: make([]int64, 0, len(c.values)), Values: make([][]byte, 0, len(c.values)), Timers: []timerJSON{}}
	for k := range c.values {
		st.Keys = append(st.Keys, k)
	}
	slices.Sort(st.Keys)
	for _, k := range st.Keys {
		st.Values = append(st.Values, c.values[k])
	}
	ts := make([]timer, 0, len(c.timers))
	for tm := range c.timers {
		ts = append(ts, tm)
	}
	slices.SortFunc(ts, compareTimers)
	for _, tm := range ts {
		st.Timers = append(st.Timers, timerJSON{Key: tm.key, At: tm.at})
	}
	return json.Marshal(st)
}

// restore makes the values and timers those of a snapshot.
func (c *Context) restore(b []byte) error {
	var st keyedState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	if len(st.Keys) != len(st.Values) {
		return fmt.Errorf("%d keys but %d values", len(st.Keys), len(st.Values))
	}
	c.values = make(map[int64][]byte, len(st.Keys))
	for i, k := range st.Keys {
		c.values[k] = st.Values[i]
	}
	c.timers = make(map[timer]struct{}, len(st.Timers))
	for _, tm := range st.Timers {
		c.timers[timer{tm.Key, tm.At}] = struct{}{}
	}
	return nil
}

// empty reports whether the context holds no value and no timer.
func (c *Context) empty() bool { return len(c.values) == 0 && len(c.timers) == 0 }

// KeyedValues reads the values of a keyed transform's checkpointed state, by key (for
// checkers that look into a checkpoint; Context.Int64 reads one value).
func KeyedValues(b []byte) (map[int64][]byte, error) {
	var st keyedState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, err
	}
	if len(st.Keys) != len(st.Values) {
		return nil, fmt.Errorf("%d keys but %d values", len(st.Keys), len(st.Values))
	}
	m := make(map[int64][]byte, len(st.Keys))
	for i, k := range st.Keys {
		m[k] = st.Values[i]
	}
	return m, nil
}

// Int64Value reads a value SetInt64 wrote, and false for one of another length.
func Int64Value(v []byte) (int64, bool) {
	if len(v) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}
