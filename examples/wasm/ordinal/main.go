//go:build wasip1

// Command ordinal is a user function (docs/user-functions.md): a keyed PROCESS function over
// window results ({"key":...,"start":...,"count":...,...}, keyed by the window's key) that
// numbers each key's results 1, 2, 3, ... in the order they arrive, keeping the count in the
// key's state, and adds the number to the result: {...,"ordinal":n}. Window results of one
// key arrive in window order, so a key's ordinals in window order are 1..k; a state write
// lost across a restore (an older count restored) shows as an ordinal repeated or skipped.
// The fault suite's pipeline workload runs it (jepsen-style/pipeline.go).
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o bin/ordinal.wasm ./examples/wasm/ordinal
package main

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/jmcluster/jmcluster/sdk/fn"
)

var buf []byte // reused: the SDK copies what is emitted before the call returns

// number is the function the job spec names.
//
//go:wasmexport number
func number(n uint32) uint32 {
	return fn.Process(n, func(r fn.Record, out *fn.Output) error {
		v := r.Value
		if len(v) < 2 || v[0] != '{' || v[len(v)-1] != '}' {
			return fmt.Errorf("record of key %q: value %q is not a JSON object", r.Key, v)
		}
		var count uint64
		if st, ok := r.State(); ok && len(st) == 8 {
			count = binary.LittleEndian.Uint64(st)
		}
		count++
		var st [8]byte
		binary.LittleEndian.PutUint64(st[:], count)
		r.SetState(st[:])
		buf = append(buf[:0], v[:len(v)-1]...)
		buf = append(buf, `,"ordinal":`...)
		buf = strconv.AppendUint(buf, count, 10)
		buf = append(buf, '}')
		out.EmitValue(buf)
		return nil
	})
}

func main() {}
