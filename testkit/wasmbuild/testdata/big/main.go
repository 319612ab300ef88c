//go:build wasip1

// Command big is a hostile module: each record it maps gets a value of 2 MiB, over a
// TaskManager's default maximum record size.
package main

import "github.com/jmcluster/jmcluster/sdk/fn"

//go:wasmexport grow
func grow(size uint32) uint32 {
	return fn.Map(size, func(r fn.Record) (fn.Record, error) {
		r.Value = make([]byte, 2<<20)
		return r, nil
	})
}

func main() {}
