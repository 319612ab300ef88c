package membership

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/hashicorp/memberlist"
)

// Role is the kind of process a pool member is.
type Role string

// The roles a node can gossip.
const (
	RoleJobMaster   Role = "jobmaster"
	RoleTaskManager Role = "taskmanager"
)

// Valid reports whether r is a role this build knows.
func (r Role) Valid() bool {
	return r == RoleJobMaster || r == RoleTaskManager
}

// metaVersion is the wire version of the encoded metadata. Adding an optional
// field keeps the version (older parsers ignore unknown keys); changing the
// meaning or type of a field bumps it.
const metaVersion = 1

// Meta is the metadata every node gossips about itself. It is encoded and
// parsed only by Encode and ParseMeta.
type Meta struct {
	Role     Role   // jobmaster or taskmanager
	ID       string // stable node id (the JM's raft server id or the TM id)
	GRPCAddr string // host:port of the node's gRPC server
	DataAddr string // host:port of a TM's data-exchange server (empty on a JM)
	Slots    int32  // task slots a TM offers (0 on a JM)
	// Incarnation is a TM process's random instance id, chosen at start-up: a restarted TM has
	// a new one, so what gossip says of the previous process is told apart from the new one.
	Incarnation string
	Version     string // build version of the binary
	Epoch       uint64 // the highest leader epoch the node knows
	Leader      bool   // JM only: this node is the established leader
	Leaving     bool   // set by Membership.Leave just before the node leaves
	// FSMLevel (JM only) is the newest set of replicated commands the build applies
	// (fsm.CommandLevel); builds before the field gossip 0. A leader writes a command of a
	// level only when every voter gossips it.
	FSMLevel int
}

// wireMeta is the JSON form of Meta. Keys are short because the whole
// document must fit memberlist.MetaMaxSize.
type wireMeta struct {
	V        int    `json:"v"`
	Role     Role   `json:"r"`
	ID       string `json:"id"`
	GRPCAddr string `json:"g,omitempty"`
	DataAddr string `json:"d,omitempty"`
	Slots    int32  `json:"s,omitempty"`
	Inc      string `json:"i,omitempty"`
	Version  string `json:"bv,omitempty"`
	Epoch    uint64 `json:"e,omitempty"`
	Leader   bool   `json:"l,omitempty"`
	Leaving  bool   `json:"lv,omitempty"`
	FSMLevel int    `json:"fl,omitempty"`
}

// validate checks the fields every well-formed Meta has.
func (m Meta) validate() error {
	if m.ID == "" {
		return ErrMissingID
	}
	if !m.Role.Valid() {
		return fmt.Errorf("%w: %q", ErrUnknownRole, m.Role)
	}
	if m.FSMLevel < 0 {
		return fmt.Errorf("%w: negative fsm level %d", ErrMalformedMeta, m.FSMLevel)
	}
	if m.Slots < 0 {
		return fmt.Errorf("%w: negative slots %d", ErrMalformedMeta, m.Slots)
	}
	return nil
}

// Encode returns the compact wire form of m. It fails if m has no id, an
// unknown role, or does not fit memberlist.MetaMaxSize.
func (m Meta) Encode() ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("encode meta: %w", err)
	}
	b, err := json.Marshal(wireMeta{
		V:        metaVersion,
		Role:     m.Role,
		ID:       m.ID,
		GRPCAddr: m.GRPCAddr,
		DataAddr: m.DataAddr,
		Slots:    m.Slots,
		Inc:      m.Incarnation,
		Version:  m.Version,
		Epoch:    m.Epoch,
		Leader:   m.Leader,
		Leaving:  m.Leaving,
		FSMLevel: m.FSMLevel,
	})
	if err != nil {
		return nil, fmt.Errorf("encode meta: %w", err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("encode meta: %w: %d bytes, limit %d",
			ErrMetaTooLarge, len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// ParseMeta decodes metadata written by Encode. Errors wrap ErrMalformedMeta,
// ErrUnsupportedMetaVersion, ErrUnknownRole, ErrMissingID or ErrMetaTooLarge (a document
// larger than memberlist.MetaMaxSize, which Encode would never write).
func ParseMeta(b []byte) (Meta, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return Meta{}, fmt.Errorf("%w: empty", ErrMalformedMeta)
	}
	if len(b) > memberlist.MetaMaxSize {
		return Meta{}, fmt.Errorf("parse meta: %w: %d bytes, limit %d", ErrMetaTooLarge, len(b), memberlist.MetaMaxSize)
	}
	var w wireMeta
	if err := json.Unmarshal(b, &w); err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrMalformedMeta, err)
	}
	switch {
	case w.V == 0:
		return Meta{}, fmt.Errorf("%w: no version field", ErrMalformedMeta)
	case w.V != metaVersion:
		return Meta{}, fmt.Errorf("%w: got %d, want %d", ErrUnsupportedMetaVersion, w.V, metaVersion)
	}
	m := Meta{
		Role:        w.Role,
		ID:          w.ID,
		GRPCAddr:    w.GRPCAddr,
		DataAddr:    w.DataAddr,
		Slots:       w.Slots,
		Incarnation: w.Inc,
		Version:     w.Version,
		Epoch:       w.Epoch,
		Leader:      w.Leader,
		Leaving:     w.Leaving,
		FSMLevel:    w.FSMLevel,
	}
	if err := m.validate(); err != nil {
		return Meta{}, fmt.Errorf("parse meta: %w", err)
	}
	return m, nil
}
