package operator

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// Context is what a transform reaches its task through: the records it emits, the value the
// runtime keeps for the current key, and the timers it registers. The current key is the
// key of the record being processed or of the timer firing. Values and timers are the
// runtime's, snapshotted in the checkpoint of a transform registered as keyed (keyedState).
// A Context is used on the task's goroutine only.
type Context struct {
	info Info
	out  Emit
	key  []byte
	nums slab // the 8-byte values of Int64Bytes

	values map[string]*keyValue
	timers map[timer]struct{}
	// watermark is the task's event-time clock: the watermark its inputs passed, NoTimestamp
	// before the first.
	watermark int64
}

// keyValue holds one key's value. The map holds a pointer so that a key's value changes in
// place: a map assignment m[string(k)] = v converts (allocates) the key even when it is there,
// a lookup m[string(k)] does not, so SetValue of a key that has a value is one lookup and no
// allocation (the window operator sets its key's value on every record).
type keyValue struct{ b []byte }

// timer is a registered timer: fire at time at for key.
type timer struct {
	key string
	at  int64
}

func newContext(info Info) *Context {
	return &Context{info: info, values: map[string]*keyValue{}, timers: map[timer]struct{}{}, watermark: NoTimestamp}
}

// Watermark is the task's current watermark: no record at or before it is to come, except
// late ones (NoTimestamp before the first watermark).
func (c *Context) Watermark() int64 { return c.watermark }

// DeadLetter sends r to the job's dead-letter output with the reason it could not be handled
// (DeadLetterRecord), and counts it.
func (c *Context) DeadLetter(r Record, reason string) error {
	return sendDeadLetter(c.info, r, reason)
}

// Info describes the task the transform runs in.
func (c *Context) Info() Info { return c.info }

// Emit hands r to the downstream partitions (Emit).
func (c *Context) Emit(r Record) error { return c.out(r) }

// Key is the current key. The bytes are the record's or the timer's: not to be changed.
func (c *Context) Key() []byte { return c.key }

// Int64Bytes returns n as a numeric value (8 bytes, big endian) for a record to emit: a new
// slice, carved from a larger allocation shared by the next ones.
func (c *Context) Int64Bytes(n int64) []byte { return c.nums.int64Bytes(n) }

// Value returns the current key's value, and false when it has none. The bytes stay valid
// until the next SetValue or ClearValue of that key.
func (c *Context) Value() ([]byte, bool) {
	if kv := c.values[string(c.key)]; kv != nil {
		return kv.b, true
	}
	return nil, false
}

// SetValue makes a copy of v the current key's value: in place when the key has one.
func (c *Context) SetValue(v []byte) {
	if kv := c.values[string(c.key)]; kv != nil {
		kv.b = append(kv.b[:0], v...)
		return
	}
	c.values[string(c.key)] = &keyValue{append([]byte(nil), v...)}
}

// entry is the current key's value holder, nil when it has none: a transform of this package
// that reads its key's value and then sets it (the window operator, on every record) looks
// the key up once, with setEntry. It stays the key's until ClearValue or restore.
func (c *Context) entry() *keyValue { return c.values[string(c.key)] }

// setEntry makes a copy of v the value in kv, the current key's entry; with kv nil, as
// SetValue of a key without a value.
func (c *Context) setEntry(kv *keyValue, v []byte) {
	if kv == nil {
		c.values[string(c.key)] = &keyValue{append([]byte(nil), v...)}
		return
	}
	kv.b = append(kv.b[:0], v...)
}

// ClearValue removes the current key's value.
func (c *Context) ClearValue() { delete(c.values, string(c.key)) }

// Int64 returns the current key's value read as an int64 (SetInt64), and false when it has
// none.
func (c *Context) Int64() (int64, bool) {
	if kv := c.values[string(c.key)]; kv != nil {
		return Int64Of(kv.b)
	}
	return 0, false
}

// SetInt64 makes n the current key's value (8 bytes, big endian).
func (c *Context) SetInt64(n int64) {
	if kv := c.values[string(c.key)]; kv != nil {
		if len(kv.b) == Int64Size {
			binary.BigEndian.PutUint64(kv.b, uint64(n))
		} else {
			kv.b = Int64Bytes(n)
		}
		return
	}
	c.values[string(c.key)] = &keyValue{Int64Bytes(n)}
}

// RegisterTimer registers a timer for the current key at time at; registering it again
// changes nothing.
func (c *Context) RegisterTimer(at int64) { c.timers[timer{string(c.key), at}] = struct{}{} }

// DeleteTimer removes the current key's timer at time at, if it is registered.
func (c *Context) DeleteTimer(at int64) { delete(c.timers, timer{string(c.key), at}) }

// advance moves the watermark to t (never back) and fires every timer at or before t in order
// of time then key, and those the handler registers at or before t meanwhile; a timer is
// removed before it fires.
func (c *Context) advance(t int64, h TimerHandler) error {
	c.watermark = max(c.watermark, t)
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
			c.key = []byte(tm.key)
			if err := h.OnTimer(c, tm.at); err != nil {
				return fmt.Errorf("timer at %d for key %s: %w", tm.at, FormatKey(c.key), err)
			}
		}
	}
}

// endOfTime is the time every pending timer fires at when the input ends.
const endOfTime = math.MaxInt64

func compareTimers(a, b timer) int {
	if a.at != b.at {
		return cmp.Compare(a.at, b.at)
	}
	return compareKeys(a.key, b.key)
}

// compareKeys orders keys: numeric keys (8 bytes) first, by their number, then the others by
// their bytes.
func compareKeys(a, b string) int {
	an, bn := len(a) == Int64Size, len(b) == Int64Size
	switch {
	case an && bn:
		return cmp.Compare(int64(binary.BigEndian.Uint64([]byte(a))), int64(binary.BigEndian.Uint64([]byte(b))))
	case an:
		return -1
	case bn:
		return 1
	}
	return bytes.Compare([]byte(a), []byte(b))
}

// FormatKey shows a key: a numeric key as its number, another as a quoted string.
func FormatKey(k []byte) string {
	if n, ok := Int64Of(k); ok {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%q", k)
}

// keyedState is the checkpointed state of a keyed transform: every key's value, in key order,
// and every pending timer, in firing order. A JSON document, like every operator's state.
// Numeric keys (8 bytes) are numbers in keys and a timer's key (the format of every state
// before keys were bytes); the others are base64 in bkeys (with their values in bvalues) and
// a timer's bkey. Watermark is the task's watermark (absent before the first, and in the
// states before event time: both restore as NoTimestamp).
type keyedState struct {
	Keys      []int64     `json:"keys"`
	Values    [][]byte    `json:"values"`
	BKeys     [][]byte    `json:"bkeys,omitempty"`
	BValues   [][]byte    `json:"bvalues,omitempty"`
	Timers    []timerJSON `json:"timers"`
	Watermark *int64      `json:"watermark,omitempty"`
}

type timerJSON struct {
	Key  int64   `json:"key"`
	BKey *[]byte `json:"bkey,omitempty"`
	At   int64   `json:"at"`
}

// snapshot encodes the values, timers and watermark.
func (c *Context) snapshot() ([]byte, error) {
	keys := make([]string, 0, len(c.values))
	for k := range c.values {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	st := keyedState{Keys: []int64{}, Values: [][]byte{}, Timers: []timerJSON{}}
	for _, k := range keys {
		if n, ok := Int64Of([]byte(k)); ok {
			st.Keys, st.Values = append(st.Keys, n), append(st.Values, c.values[k].b)
		} else {
			st.BKeys, st.BValues = append(st.BKeys, []byte(k)), append(st.BValues, c.values[k].b)
		}
	}
	ts := make([]timer, 0, len(c.timers))
	for tm := range c.timers {
		ts = append(ts, tm)
	}
	slices.SortFunc(ts, compareTimers)
	for _, tm := range ts {
		if n, ok := Int64Of([]byte(tm.key)); ok {
			st.Timers = append(st.Timers, timerJSON{Key: n, At: tm.at})
		} else {
			k := []byte(tm.key)
			st.Timers = append(st.Timers, timerJSON{BKey: &k, At: tm.at})
		}
	}
	if c.watermark != NoTimestamp {
		wm := c.watermark
		st.Watermark = &wm
	}
	return json.Marshal(st)
}

// restore makes the values, timers and watermark those of a snapshot.
func (c *Context) restore(b []byte) error {
	values, st, err := readKeyedState(b)
	if err != nil {
		return err
	}
	c.values = make(map[string]*keyValue, len(values))
	for k, v := range values {
		c.values[k] = &keyValue{v}
	}
	c.timers = make(map[timer]struct{}, len(st.Timers))
	for _, tm := range st.Timers {
		k := string(Int64Bytes(tm.Key))
		if tm.BKey != nil {
			k = string(*tm.BKey)
		}
		c.timers[timer{k, tm.At}] = struct{}{}
	}
	// The planted bug watermark-regress restores no watermark: the task's starts from none,
	// behind the checkpoint's, until its inputs' first watermark.
	if st.Watermark != nil && !failpoint.Enabled(failpoint.WatermarkRegress) {
		c.watermark = max(c.watermark, *st.Watermark) // never back
	}
	return nil
}

// readKeyedState reads a keyedState and its values by key.
func readKeyedState(b []byte) (map[string][]byte, keyedState, error) {
	var st keyedState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, st, err
	}
	if len(st.Keys) != len(st.Values) {
		return nil, st, fmt.Errorf("%d keys but %d values", len(st.Keys), len(st.Values))
	}
	if len(st.BKeys) != len(st.BValues) {
		return nil, st, fmt.Errorf("%d bytes keys but %d values", len(st.BKeys), len(st.BValues))
	}
	m := make(map[string][]byte, len(st.Keys)+len(st.BKeys))
	for i, k := range st.Keys {
		m[string(Int64Bytes(k))] = st.Values[i]
	}
	for i, k := range st.BKeys {
		m[string(k)] = st.BValues[i]
	}
	return m, st, nil
}

// empty reports whether the context holds no value and no timer.
func (c *Context) empty() bool { return len(c.values) == 0 && len(c.timers) == 0 }

// KeyedValues reads the values of a keyed transform's checkpointed state whose keys are
// numeric, by key (for checkers that look into a checkpoint; Context.Int64 reads one value).
// A state with a key that is not numeric is an error.
func KeyedValues(b []byte) (map[int64][]byte, error) {
	values, _, err := readKeyedState(b)
	if err != nil {
		return nil, err
	}
	m := make(map[int64][]byte, len(values))
	for k, v := range values {
		n, ok := Int64Of([]byte(k))
		if !ok {
			return nil, fmt.Errorf("key %q: %w", k, ErrNotNumeric)
		}
		m[n] = v
	}
	return m, nil
}

// Int64Value reads a value SetInt64 wrote, and false for one of another length.
func Int64Value(v []byte) (int64, bool) { return Int64Of(v) }
