//go:build wasip1

// Command importer is a hostile module: it imports env.foo, which the host does not offer.
package main

import "github.com/jmcluster/jmcluster/sdk/fn"

//go:wasmimport env foo
func foo() uint32

//go:wasmexport call
func call(size uint32) uint32 {
	return fn.Map(size, func(r fn.Record) (fn.Record, error) {
		foo()
		return r, nil
	})
}

func main() {}
