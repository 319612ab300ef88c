package operator

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// The window operator's per-key state and its results (window.go runs them).
//
// A key's value in the Context is its open windows, sorted by start, in a fixed binary
// layout: a version byte (windowStateV1), then windowBytes per window:
//
//	start int64 | end int64 | count int64 | emitted uint32 | flags uint8 | sum | min | max
//
// little endian; sum, min and max are int64 while every value was an integer and the sum fits
// (flag winFloat clear), else float64 bits. emitted counts the results emitted for the window
// (0: it has not fired); winDirty says records came since the last one. No encoding/json on
// the path of a record: a record decodes and encodes its key's few windows in place.

const (
	windowStateV1 = 1
	windowBytes   = 8 + 8 + 8 + 4 + 1 + 8 + 8 + 8

	winDirty = 1 << 0 // records not in the last emitted result (or none emitted yet)
	winFloat = 1 << 1 // sum, min and max are float64
)

// window is one open window of a key and its accumulators.
type window struct {
	start, end int64
	count      int64
	emitted    uint32
	flags      uint8
	sumI       int64 // with winFloat clear
	minI, maxI int64
	sumF       float64 // with winFloat set
	minF, maxF float64
}

// number is a value of the window's field: an integer when its JSON text is one that fits
// int64, else a float64.
type number struct {
	isInt bool
	i     int64
	f     float64
}

// parseNumber reads the JSON number text raw (already known to be a number).
func parseNumber(raw string) (number, error) {
	isInt := true
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c == '.' || c == 'e' || c == 'E' {
			isInt = false
			break
		}
	}
	if isInt {
		if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
			return number{isInt: true, i: n, f: float64(n)}, nil
		}
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil || math.IsInf(f, 0) {
		return number{}, fmt.Errorf("is out of the range of a float64")
	}
	return number{f: f}, nil
}

// add counts a record in w, with its field's value n when the window has a field. It fails,
// changing nothing, when a float sum would leave the finite numbers.
func (w *window) add(n number, hasField bool) error {
	if !hasField {
		w.count++
		return nil
	}
	if w.flags&winFloat == 0 && n.isInt {
		s, overflow := addInt64(w.sumI, n.i)
		if !overflow {
			if w.count == 0 {
				w.minI, w.maxI = n.i, n.i
			} else {
				w.minI, w.maxI = min(w.minI, n.i), max(w.maxI, n.i)
			}
			w.sumI = s
			w.count++
			return nil
		}
	}
	if w.flags&winFloat == 0 { // from integers to floats, for good
		w.sumF, w.minF, w.maxF = float64(w.sumI), float64(w.minI), float64(w.maxI)
	}
	s := w.sumF + n.f
	if math.IsInf(s, 0) {
		return fmt.Errorf("would make the window's sum leave the range of a float64")
	}
	w.flags |= winFloat
	if w.count == 0 {
		w.minF, w.maxF = n.f, n.f
	} else {
		w.minF, w.maxF = min(w.minF, n.f), max(w.maxF, n.f)
	}
	w.sumF = s
	w.count++
	return nil
}

// merge adds o's records to w (session windows that a record bridges); false when the float
// sum would not be finite.
func (w *window) merge(o *window, hasField bool) bool {
	w.start, w.end = min(w.start, o.start), max(w.end, o.end)
	w.emitted = max(w.emitted, o.emitted)
	w.flags |= o.flags & winDirty
	if !hasField { // every window holds at least one record, and with a field its value
		w.count += o.count
		return true
	}
	if w.flags&winFloat == 0 && o.flags&winFloat == 0 {
		if s, overflow := addInt64(w.sumI, o.sumI); !overflow {
			w.sumI, w.minI, w.maxI = s, min(w.minI, o.minI), max(w.maxI, o.maxI)
			w.count += o.count
			return true
		}
	}
	ws, wmin, wmax := w.floats()
	os, omin, omax := o.floats()
	if math.IsInf(ws+os, 0) {
		return false
	}
	w.flags |= winFloat
	w.sumF, w.minF, w.maxF = ws+os, min(wmin, omin), max(wmax, omax)
	w.count += o.count
	return true
}

// floats is w's sum, min and max as float64.
func (w *window) floats() (float64, float64, float64) {
	if w.flags&winFloat != 0 {
		return w.sumF, w.minF, w.maxF
	}
	return float64(w.sumI), float64(w.minI), float64(w.maxI)
}

func addInt64(a, b int64) (int64, bool) {
	s := a + b
	return s, (a >= 0) == (b >= 0) && (s >= 0) != (a >= 0)
}

// decodeWindows appends the windows of a key's value to ws.
func decodeWindows(ws []window, v []byte) ([]window, error) {
	if len(v) == 0 {
		return ws, nil
	}
	if v[0] != windowStateV1 || (len(v)-1)%windowBytes != 0 {
		return ws, fmt.Errorf("window state of %d bytes, version %d: not the format of this build (version %d, 1 + %d bytes per window)", len(v), v[0], windowStateV1, windowBytes)
	}
	le := binary.LittleEndian
	for b := v[1:]; len(b) > 0; b = b[windowBytes:] {
		w := window{
			start: int64(le.Uint64(b)), end: int64(le.Uint64(b[8:])), count: int64(le.Uint64(b[16:])),
			emitted: le.Uint32(b[24:]), flags: b[28],
		}
		s, lo, hi := le.Uint64(b[29:]), le.Uint64(b[37:]), le.Uint64(b[45:])
		if w.flags&winFloat != 0 {
			w.sumF, w.minF, w.maxF = math.Float64frombits(s), math.Float64frombits(lo), math.Float64frombits(hi)
		} else {
			w.sumI, w.minI, w.maxI = int64(s), int64(lo), int64(hi)
		}
		ws = append(ws, w)
	}
	return ws, nil
}

// encodeWindows appends the value of a key's windows to b.
func encodeWindows(b []byte, ws []window) []byte {
	le := binary.LittleEndian
	b = append(b, windowStateV1)
	for i := range ws {
		w := &ws[i]
		b = le.AppendUint64(b, uint64(w.start))
		b = le.AppendUint64(b, uint64(w.end))
		b = le.AppendUint64(b, uint64(w.count))
		b = le.AppendUint32(b, w.emitted)
		b = append(b, w.flags)
		if w.flags&winFloat != 0 {
			b = le.AppendUint64(b, math.Float64bits(w.sumF))
			b = le.AppendUint64(b, math.Float64bits(w.minF))
			b = le.AppendUint64(b, math.Float64bits(w.maxF))
		} else {
			b = le.AppendUint64(b, uint64(w.sumI))
			b = le.AppendUint64(b, uint64(w.minI))
			b = le.AppendUint64(b, uint64(w.maxI))
		}
	}
	return b
}

// appendResult appends the JSON result of window w of key:
// {"key":"user-0042","start":S,"end":E,"count":C,"sum":..,"min":..,"max":..,"avg":..}, the
// field's numbers only with a field, and "update":N for the window's N-th result after its
// first. Integers are written without a fraction; a float (a sum, min or max once a value was
// not an integer, and every avg) as encoding/json writes a float64 (the shortest text that
// reads back to the same number; an exponent from 1e21 and below 1e-6).
func appendResult(b, key []byte, w *window, hasField bool) []byte {
	b = append(b, `{"key":`...)
	b = appendJSONString(b, key)
	b = append(b, `,"start":`...)
	b = strconv.AppendInt(b, w.start, 10)
	b = append(b, `,"end":`...)
	b = strconv.AppendInt(b, w.end, 10)
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, w.count, 10)
	if hasField && w.count > 0 {
		var avg float64
		if w.flags&winFloat != 0 {
			b = appendFloat(append(b, `,"sum":`...), w.sumF)
			b = appendFloat(append(b, `,"min":`...), w.minF)
			b = appendFloat(append(b, `,"max":`...), w.maxF)
			avg = w.sumF / float64(w.count)
		} else {
			b = strconv.AppendInt(append(b, `,"sum":`...), w.sumI, 10)
			b = strconv.AppendInt(append(b, `,"min":`...), w.minI, 10)
			b = strconv.AppendInt(append(b, `,"max":`...), w.maxI, 10)
			avg = float64(w.sumI) / float64(w.count)
		}
		b = appendFloat(append(b, `,"avg":`...), avg)
	}
	if w.emitted > 0 {
		b = append(b, `,"update":`...)
		b = strconv.AppendUint(b, uint64(w.emitted), 10)
	}
	return append(b, '}')
}

// appendFloat writes f as encoding/json does: 'f' format, or 'e' with a short exponent
// below 1e-6 and from 1e21.
func appendFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		n := len(b)
		b = strconv.AppendFloat(b, f, 'e', -1, 64)
		// clean up e-09 to e-9, as encoding/json does
		if m := len(b) - n; m >= 4 && b[len(b)-4] == 'e' && b[len(b)-3] == '-' && b[len(b)-2] == '0' {
			b[len(b)-2] = b[len(b)-1]
			b = b[:len(b)-1]
		}
		return b
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

// appendJSONString appends s as a JSON string; bytes that are not valid UTF-8 become U+FFFD.
func appendJSONString(b, s []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
