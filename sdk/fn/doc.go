// Package fn is the Go SDK of jmcluster's user functions (docs/user-functions.md): a module
// built with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared writes handlers of records and
// exports each as a function a job's wasm operator names. The SDK implements the host's ABI
// (wasmhost/DESIGN.md): the input buffer (jm_alloc), the configuration (jm_init), the timers
// (jm_timer), the batches of records in and out, and the host's functions for keyed state,
// timers and logs.
//
//	//go:wasmexport upper
//	func upper(n uint32) uint32 {
//		return fn.Map(n, func(r fn.Record) (fn.Record, error) {
//			r.Value = bytes.ToUpper(r.Value)
//			return r, nil
//		})
//	}
//
// Scratch gives a handler memory for a new key or value that lasts until the call returns,
// without an allocation (costly in a module: docs/user-functions.md, "Performance").
//
// The encoding of batches (codec.go, loops.go, scratch.go) builds on every platform, so the host's tests check it;
// the rest builds for wasip1 only.
package fn
