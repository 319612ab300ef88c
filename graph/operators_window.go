package graph

import (
	"fmt"
	"strings"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The window operator's bounds.
const (
	// MaxWindowMs bounds window.size_ms, gap_ms and allowed_lateness_ms: a leap year. It keeps
	// a window's end plus its lateness far from overflowing int64 for any event time the
	// operator accepts.
	MaxWindowMs = 366 * 24 * 3600 * 1000
	// MaxSlidingWindows bounds size_ms/slide_ms of a SLIDING window: the windows one record
	// is counted in.
	MaxSlidingWindows = 100
	// MaxWindowFieldBytes bounds the length of window.field.
	MaxWindowFieldBytes = 256
)

func validateWindow(op *pb.Operator, _ OperatorEnv, add addFunc) {
	w := op.GetWindow()
	kind := w.GetKind()
	name, known := pb.WindowKind_name[int32(kind)]
	name = strings.TrimPrefix(name, "WINDOW_KIND_")
	switch kind {
	case pb.WindowKind_WINDOW_KIND_TUMBLING, pb.WindowKind_WINDOW_KIND_SLIDING:
		checkWindowMs(add, "window.size_ms", w.GetSizeMs())
		if w.GetGapMs() != 0 {
			add("window.gap_ms", "%d must be 0 for a %s window (gap_ms is for SESSION)", w.GetGapMs(), name)
		}
	case pb.WindowKind_WINDOW_KIND_SESSION:
		checkWindowMs(add, "window.gap_ms", w.GetGapMs())
		if w.GetSizeMs() != 0 {
			add("window.size_ms", "%d must be 0 for a SESSION window (size_ms is for TUMBLING and SLIDING)", w.GetSizeMs())
		}
	case pb.WindowKind_WINDOW_KIND_UNSPECIFIED:
		add("window.kind", "is unset: TUMBLING, SLIDING or SESSION")
	default:
		add("window.kind", "%d is not a WindowKind", int32(kind))
	}
	if kind == pb.WindowKind_WINDOW_KIND_SLIDING {
		checkSlide(add, w.GetSizeMs(), w.GetSlideMs())
	} else if w.GetSlideMs() != 0 && known && kind != pb.WindowKind_WINDOW_KIND_UNSPECIFIED {
		add("window.slide_ms", "%d must be 0 for a %s window (slide_ms is for SLIDING)", w.GetSlideMs(), name)
	}
	if l := w.GetAllowedLatenessMs(); l < 0 || l > MaxWindowMs {
		add("window.allowed_lateness_ms", "%d is out of range [0, MaxWindowMs %d]", l, int64(MaxWindowMs))
	}
	if err := CheckWindowField(w.GetField()); err != "" {
		add("window.field", "%q %s", w.GetField(), err)
	}
}

// checkWindowMs checks a window length: > 0 and at most MaxWindowMs.
func checkWindowMs(add addFunc, field string, v int64) {
	if v <= 0 || v > MaxWindowMs {
		add(field, "%d is out of range [1, MaxWindowMs %d]", v, int64(MaxWindowMs))
	}
}

// checkSlide checks a SLIDING window's slide_ms against its size_ms (already checked).
func checkSlide(add addFunc, size, slide int64) {
	switch {
	case slide <= 0 || slide > MaxWindowMs:
		add("window.slide_ms", "%d is out of range [1, MaxWindowMs %d]", slide, int64(MaxWindowMs))
	case size <= 0 || size > MaxWindowMs:
		// size_ms is reported
	case slide > size:
		add("window.slide_ms", "%d is more than size_ms %d", slide, size)
	case size%slide != 0:
		add("window.slide_ms", "%d does not divide size_ms %d", slide, size)
	case size/slide > MaxSlidingWindows:
		add("window.slide_ms", "%d makes size_ms/slide_ms %d windows per record, more than MaxSlidingWindows %d", slide, size/slide, MaxSlidingWindows)
	}
}

// CheckWindowField checks the path of a window's field (JsonKeyBy.path's form): empty (count
// only), or object fields (an array element by its index) separated by dots, none of them
// empty, at most MaxWindowFieldBytes without control characters (a protobuf string is valid
// UTF-8). It returns what is wrong, or "". Every other character is taken literally (the
// operator escapes the path language's special characters).
func CheckWindowField(p string) string {
	switch {
	case p == "":
		return ""
	case len(p) > MaxWindowFieldBytes:
		return fmt.Sprintf("is %d bytes, more than MaxWindowFieldBytes %d", len(p), MaxWindowFieldBytes)
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "contains a control character"
	}
	for _, s := range strings.Split(p, ".") {
		if s == "" {
			return "has an empty element (a path is names separated by single dots)"
		}
	}
	return ""
}
