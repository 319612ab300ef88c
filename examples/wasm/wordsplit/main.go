//go:build wasip1

// Command wordsplit is a user function (docs/user-functions.md): a FLAT_MAP that splits a
// record's value, text, into words and emits one record per word, its key and value the word.
// Configuration: {"lower": true} folds the words to lower case; {"min_length": n} drops the
// words shorter than n bytes.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o bin/wordsplit.wasm ./examples/wasm/wordsplit
package main

import (
	"bytes"
	"encoding/json"
	"unicode"

	"github.com/jmcluster/jmcluster/sdk/fn"
)

var cfg struct {
	Lower     bool `json:"lower"`
	MinLength int  `json:"min_length"`
}

func init() {
	fn.HandleInit(func(config []byte) error {
		if len(config) == 0 {
			return nil
		}
		return json.Unmarshal(config, &cfg)
	})
}

// split is the function the job spec names.
//
//go:wasmexport split
func split(n uint32) uint32 {
	return fn.FlatMap(n, func(r fn.Record, out *fn.Output) error {
		for _, w := range bytes.FieldsFunc(r.Value, func(c rune) bool { return !unicode.IsLetter(c) && !unicode.IsDigit(c) && c != '\'' }) {
			if len(w) < cfg.MinLength {
				continue
			}
			if cfg.Lower {
				w = bytes.ToLower(w)
			}
			out.EmitKeyValue(w, w)
		}
		return nil
	})
}

func main() {}
