package membership

import (
	"errors"
	"testing"
)

// FuzzParseMeta decodes arbitrary bytes as gossip metadata. Properties: nothing panics; an
// accepted document re-encodes with Encode (or is refused only for its size, which HTML
// escaping can grow) and decodes again to the same Meta. Seeds: testdata/fuzz/FuzzParseMeta.
func FuzzParseMeta(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMeta(b)
		if err != nil {
			if !errors.Is(err, ErrMalformedMeta) && !errors.Is(err, ErrUnsupportedMetaVersion) &&
				!errors.Is(err, ErrUnknownRole) && !errors.Is(err, ErrMissingID) && !errors.Is(err, ErrMetaTooLarge) {
				t.Fatalf("ParseMeta error wraps no sentinel: %v", err)
			}
			return
		}
		enc, err := m.Encode()
		if err != nil {
			if errors.Is(err, ErrMetaTooLarge) {
				return
			}
			t.Fatalf("accepted metadata %+v does not encode: %v", m, err)
		}
		m2, err := ParseMeta(enc)
		if err != nil {
			t.Fatalf("ParseMeta(Encode(%+v)) = %v (wire %q)", m, err, enc)
		}
		if m2 != m {
			t.Fatalf("round trip: %+v -> %q -> %+v", m, enc, m2)
		}
	})
}
