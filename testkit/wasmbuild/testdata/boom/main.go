//go:build wasip1

// Command boom is a hostile module: its function panics outside the SDK's handlers, so the Go
// runtime prints the panic and exits (a trap to the host).
package main

//go:wasmexport jm_alloc
func alloc(size uint32) uint32 { return 1024 }

//go:wasmexport boom
func boom(size uint32) uint32 {
	panic("boom: the function gave up")
}

func main() {}
