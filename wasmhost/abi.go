package wasmhost

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// The bounds of what a call hands the host.
const (
	// MaxOutputBytes bounds the output of one call (the records it hands to output).
	MaxOutputBytes = 64 << 20
	// MaxStateValueBytes bounds one key's state value (state_put).
	MaxStateValueBytes = 4 << 20
	// MaxFailMessageBytes bounds the message of fail.
	MaxFailMessageBytes = 1024
)

// hostFunction is a function of HostModule.
type hostFunction struct {
	name            string
	params, results []api.ValueType
	fn              func(in *Instance, stack []uint64)
}

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// hostFunctions is HostModule: what a module may import besides WASI (DESIGN.md, "ABI").
var hostFunctions = []hostFunction{
	{"output", []api.ValueType{i32, i32}, nil, hostOutput},
	{"fail", []api.ValueType{i32, i32}, nil, hostFail},
	{"log", []api.ValueType{i32, i32}, nil, hostLog},
	{"state_get", []api.ValueType{i32, i32, i32}, []api.ValueType{i32}, hostStateGet},
	{"state_put", []api.ValueType{i32, i32, i32}, nil, hostStatePut},
	{"state_delete", []api.ValueType{i32}, nil, hostStateDelete},
	{"timer_register", []api.ValueType{i32, i64}, nil, hostTimerRegister},
	{"timer_delete", []api.ValueType{i32, i64}, nil, hostTimerDelete},
	{"watermark", nil, []api.ValueType{i64}, hostWatermark},
}

func instantiateHostModule(ctx context.Context, r wazero.Runtime) error {
	b := r.NewHostModuleBuilder(HostModule)
	for _, f := range hostFunctions {
		fn := f.fn
		b = b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, _ api.Module, stack []uint64) {
			in, _ := ctx.Value(instanceKey{}).(*Instance)
			if in == nil {
				panic(fmt.Errorf("%s.%s called outside a call of the host", HostModule, f.name))
			}
			fn(in, stack)
		}), f.params, f.results).Export(f.name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// read returns the module's bytes [ptr, ptr+n) (a view: copy to keep), failing the call when
// they are outside its memory.
func (in *Instance) read(what string, ptr, n uint32) []byte {
	b, ok := in.mem.Read(ptr, n)
	if !ok {
		panic(fmt.Errorf("%s: [%#x, +%d) is outside the module's memory of %d bytes", what, ptr, n, in.mem.Size()))
	}
	return b
}

func (in *Instance) needState(what string) State {
	if in.state == nil {
		panic(fmt.Errorf("%s.%s is for PROCESS functions (keyed state), and %s is not called as one", HostModule, what, in.fn))
	}
	return in.state
}

func hostOutput(in *Instance, s []uint64) {
	b := in.read("output", uint32(s[0]), uint32(s[1]))
	if len(in.out)+len(b) > MaxOutputBytes {
		panic(fmt.Errorf("output: the call's output is over MaxOutputBytes %d", MaxOutputBytes))
	}
	in.out = append(in.out, b...)
}

func hostFail(in *Instance, s []uint64) {
	n := min(uint32(s[1]), MaxFailMessageBytes)
	in.failMsg = string(in.read("fail", uint32(s[0]), n))
}

func hostLog(in *Instance, s []uint64) {
	n := min(uint32(s[1]), MaxLogLineBytes)
	b := in.read("log", uint32(s[0]), n)
	_, _ = in.stdout.Write(append(append([]byte(nil), b...), '\n'))
}

// hostStateGet copies the state of record idx's key into [ptr, ptr+cap) and returns its
// length (more than cap: nothing copied, call again with a larger buffer), or -1 for none.
func hostStateGet(in *Instance, s []uint64) {
	st := in.needState("state_get")
	v, ok := st.Get(uint32(s[0]))
	if !ok {
		s[0] = api.EncodeI32(-1)
		return
	}
	if uint32(len(v)) <= uint32(s[2]) && len(v) > 0 {
		copy(in.read("state_get", uint32(s[1]), uint32(len(v))), v)
	}
	s[0] = api.EncodeI32(int32(len(v)))
}

func hostStatePut(in *Instance, s []uint64) {
	st := in.needState("state_put")
	if uint32(s[2]) > MaxStateValueBytes {
		panic(fmt.Errorf("state_put: a value of %d bytes is over MaxStateValueBytes %d", uint32(s[2]), MaxStateValueBytes))
	}
	st.Put(uint32(s[0]), in.read("state_put", uint32(s[1]), uint32(s[2])))
}

func hostStateDelete(in *Instance, s []uint64) { in.needState("state_delete").Delete(uint32(s[0])) }

func hostTimerRegister(in *Instance, s []uint64) {
	in.needState("timer_register").RegisterTimer(uint32(s[0]), int64(s[1]))
}

func hostTimerDelete(in *Instance, s []uint64) {
	in.needState("timer_delete").DeleteTimer(uint32(s[0]), int64(s[1]))
}

func hostWatermark(in *Instance, s []uint64) { s[0] = uint64(in.needState("watermark").Watermark()) }

var _ = binary.LittleEndian
