//go:build wasip1

// Command big is a hostile module: the first record it maps gets a value of 2 MiB, over a
// TaskManager's default maximum record size; the others pass unchanged.
package main

import "github.com/jmcluster/jmcluster/sdk/fn"

var done bool

//go:wasmexport grow
func grow(size uint32) uint32 {
	return fn.Map(size, func(r fn.Record) (fn.Record, error) {
		if !done {
			r.Value, done = make([]byte, 2<<20), true
		}
		return r, nil
	})
}

func main() {}
