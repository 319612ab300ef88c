package operator

import (
	"encoding/json"
	"fmt"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func init() {
	register("key_by_sum", runtime{transform: func(*pb.Operator, Info) Transform { return keyBySum{} }, keyed: true})
}

// keyBySum emits (key, running sum of the key's values), of numeric values (8 bytes, big
// endian); origin and seq pass through. The sum is the key's value in the Context.
type keyBySum struct{}

func (keyBySum) Process(ctx *Context, r Record) error {
	v, err := numericValue("key_by_sum", &r)
	if err != nil {
		return err
	}
	sum, _ := ctx.Int64()
	sum += v
	ctx.SetInt64(sum)
	r.Value = ctx.Int64Bytes(sum)
	return ctx.Emit(r)
}

// sumState is the format of key_by_sum's state before keyed state: the running sums, in key
// order.
type sumState struct {
	Keys []int64  `json:"keys"`
	Sums *[]int64 `json:"sums"`
}

// restoreLegacy reads a checkpoint of the sums format.
func (keyBySum) restoreLegacy(b []byte, c *Context) (bool, error) {
	var st sumState
	if err := json.Unmarshal(b, &st); err != nil || st.Sums == nil {
		return false, nil // not of this format: the keyed format's reader says what is wrong
	}
	if len(st.Keys) != len(*st.Sums) {
		return true, fmt.Errorf("%d keys but %d sums", len(st.Keys), len(*st.Sums))
	}
	for i, key := range st.Keys {
		c.key = Int64Bytes(key)
		c.SetInt64((*st.Sums)[i])
	}
	return true, nil
}
