package graph

import (
	"encoding/json"
	"strings"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The wasm operator's bounds (docs/user-functions.md, "Limits").
const (
	// MaxWasmMemoryMiB bounds wasm.memory_limit_mib: the linear memory of one instance.
	MaxWasmMemoryMiB = 1024
	// MaxWasmCallTimeoutMs bounds wasm.call_timeout_ms: one call into the module.
	MaxWasmCallTimeoutMs = 60_000
	// MaxWasmFunctionLen bounds the length of wasm.function.
	MaxWasmFunctionLen = 128
	// MaxWasmConfigBytes bounds wasm.config, the JSON the module's init gets.
	MaxWasmConfigBytes = 64 << 10
	// WasmArtifactLen is the length of wasm.artifact: a sha256 in lower-case hex.
	WasmArtifactLen = 64
)

// WasmReservedPrefix starts the names of the exports the SDK's ABI uses (jm_alloc, jm_init,
// jm_timer): a function of the spec cannot be one of them.
const WasmReservedPrefix = "jm_"

func validateWasm(op *pb.Operator, _ OperatorEnv, add addFunc) {
	w := op.GetWasm()
	if a := w.GetArtifact(); !isSHA256Hex(a) {
		add("wasm.artifact", "%q is not a sha256: %d lower-case hex characters (WasmArtifactLen), as `jmnode artifact put` prints", a, WasmArtifactLen)
	}
	f := w.GetFunction()
	switch {
	case f == "":
		add("wasm.function", "is empty: the name of the function the module exports")
	case len(f) > MaxWasmFunctionLen:
		add("wasm.function", "is %d bytes, over MaxWasmFunctionLen %d", len(f), MaxWasmFunctionLen)
	case !isExportName(f):
		add("wasm.function", "%q is not an export name: letters, digits and _ only, not starting with a digit", f)
	case strings.HasPrefix(f, WasmReservedPrefix):
		add("wasm.function", "%q starts with %q, which the ABI's own exports use", f, WasmReservedPrefix)
	}
	switch k := w.GetKind(); {
	case k == pb.WasmKind_WASM_KIND_UNSPECIFIED:
		add("wasm.kind", "is unset: MAP, FLAT_MAP, FILTER, KEY_BY or PROCESS")
	case pb.WasmKind_name[int32(k)] == "":
		add("wasm.kind", "%d is not a WasmKind", int32(k))
	}
	if m := w.GetMemoryLimitMib(); m < 0 || m > MaxWasmMemoryMiB {
		add("wasm.memory_limit_mib", "%d is out of range [0, MaxWasmMemoryMiB %d] (0: the default)", m, MaxWasmMemoryMiB)
	}
	if t := w.GetCallTimeoutMs(); t < 0 || t > MaxWasmCallTimeoutMs {
		add("wasm.call_timeout_ms", "%d is out of range [0, MaxWasmCallTimeoutMs %d] (0: the default)", t, MaxWasmCallTimeoutMs)
	}
	if c := w.GetConfig(); len(c) > MaxWasmConfigBytes {
		add("wasm.config", "is %d bytes, over MaxWasmConfigBytes %d", len(c), MaxWasmConfigBytes)
	} else if c != "" && !json.Valid([]byte(c)) {
		add("wasm.config", "is not valid JSON")
	}
}

// isSHA256Hex reports whether s is a sha256 in lower-case hex (an artifact's name).
func isSHA256Hex(s string) bool {
	if len(s) != WasmArtifactLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isExportName: an identifier of letters, digits and _, not starting with a digit (every
// language that compiles to WebAssembly can export it).
func isExportName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return s != ""
}
