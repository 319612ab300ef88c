//go:build wasip1

// Command alloc is a hostile module: its function allocates 4 GiB.
package main

import "github.com/jmcluster/jmcluster/sdk/fn"

var keep [][]byte

//go:wasmexport hog
func hog(size uint32) uint32 {
	return fn.Map(size, func(r fn.Record) (fn.Record, error) {
		keep = append(keep, make([]byte, 4<<30))
		return r, nil
	})
}

func main() {}
