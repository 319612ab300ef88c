//go:build wasip1

// Command kinds is a test module with a function of each kind. Values are text.
//
//   - upper (MAP): the value in upper case; with {"suffix": s} in the config, s appended.
//   - upper_fast (MAP): upper's output for ASCII values (other bytes are left as they are),
//     built in fn.Scratch: no allocation per record.
//   - dup (FLAT_MAP): the record twice, then once more per "+" in the value.
//   - even (FILTER): the records whose value has an even length.
//   - first (KEY_BY): the key becomes the value's first byte.
//   - count (PROCESS): per key, the number of records so far in its state (decimal); emits
//     "key=count"; registers a timer at the record's time + 10 that emits "timer key=count"
//     and clears the state. A value "fail" returns an error; "panic" panics.
//   - echo (MAP): the record unchanged (the cost of the ABI).
//   - probe (MAP): what the sandbox lets the module see: a file, the environment, the
//     arguments, a socket, the clock and randomness.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/jmcluster/jmcluster/sdk/fn"
)

var suffix []byte

func init() {
	fn.HandleInit(func(config []byte) error {
		var c struct {
			Suffix string `json:"suffix"`
		}
		if len(config) > 0 {
			if err := json.Unmarshal(config, &c); err != nil {
				return err
			}
		}
		suffix = []byte(c.Suffix)
		return nil
	})
	fn.HandleTimer(func(t fn.Record, out *fn.Output) error {
		st, _ := t.State()
		out.Emit(t.Key, []byte("timer "+string(t.Key)+"="+string(st)), t.Time)
		t.ClearState()
		return nil
	})
}

//go:wasmexport upper
func upper(n uint32) uint32 {
	return fn.Map(n, func(r fn.Record) (fn.Record, error) {
		r.Value = append(bytes.ToUpper(r.Value), suffix...)
		return r, nil
	})
}

//go:wasmexport upper_fast
func upperFast(n uint32) uint32 {
	return fn.Map(n, func(r fn.Record) (fn.Record, error) {
		v := fn.Scratch(len(r.Value) + len(suffix))
		for i, c := range r.Value {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			v[i] = c
		}
		copy(v[len(r.Value):], suffix)
		r.Value = v
		return r, nil
	})
}

//go:wasmexport echo
func echo(n uint32) uint32 {
	return fn.Map(n, func(r fn.Record) (fn.Record, error) { return r, nil })
}

//go:wasmexport dup
func dup(n uint32) uint32 {
	return fn.FlatMap(n, func(r fn.Record, out *fn.Output) error {
		out.Forward()
		out.Emit(r.Key, r.Value, r.Time)
		for range bytes.Count(r.Value, []byte("+")) {
			out.EmitValue([]byte("+"))
		}
		return nil
	})
}

//go:wasmexport even
func even(n uint32) uint32 {
	return fn.Filter(n, func(r fn.Record) (bool, error) { return len(r.Value)%2 == 0, nil })
}

//go:wasmexport first
func first(n uint32) uint32 {
	return fn.KeyBy(n, func(r fn.Record) ([]byte, error) {
		if len(r.Value) == 0 {
			return nil, nil
		}
		return r.Value[:1], nil
	})
}

//go:wasmexport count
func count(n uint32) uint32 {
	return fn.Process(n, func(r fn.Record, out *fn.Output) error {
		switch string(r.Value) {
		case "fail":
			return errors.New("the value is fail")
		case "panic":
			panic("the value is panic")
		}
		c := 0
		if st, ok := r.State(); ok {
			c, _ = strconv.Atoi(string(st))
		}
		c++
		v := []byte(strconv.Itoa(c))
		r.SetState(v)
		if r.Time != fn.NoTimestamp {
			r.RegisterTimer(r.Time + 10)
		}
		out.EmitValue([]byte(string(r.Key) + "=" + string(v)))
		return nil
	})
}

func main() {}

//go:wasmexport probe
func probe(n uint32) uint32 {
	return fn.Map(n, func(r fn.Record) (fn.Record, error) {
		_, ferr := os.ReadFile("/etc/hostname")
		_, derr := os.ReadDir(".")
		_, nerr := net.Dial("tcp", "127.0.0.1:1")
		rb := make([]byte, 8)
		_, _ = rand.Read(rb)
		r.Value = []byte(fmt.Sprintf("file=%v dir=%v net=%v env=%d args=%d year=%d rand=%x",
			ferr != nil, derr != nil, nerr != nil, len(os.Environ()), len(os.Args), time.Now().Year(), rb))
		return r, nil
	})
}
