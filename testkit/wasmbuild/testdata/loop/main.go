//go:build wasip1

// Command loop is a hostile module: its function never returns.
package main

import "github.com/jmcluster/jmcluster/sdk/fn"

var n int

//go:wasmexport spin
func spin(size uint32) uint32 {
	return fn.Map(size, func(r fn.Record) (fn.Record, error) {
		for {
			n++
		}
	})
}

func main() {}
