package membership

import "errors"

// Sentinel errors of the membership package. Callers match them with errors.Is.
var (
	// ErrMalformedMeta means gossiped metadata could not be decoded.
	ErrMalformedMeta = errors.New("membership: malformed node metadata")
	// ErrUnsupportedMetaVersion means the metadata was written by an incompatible encoder.
	ErrUnsupportedMetaVersion = errors.New("membership: unsupported node metadata version")
	// ErrUnknownRole means the metadata names a role this build does not know.
	ErrUnknownRole = errors.New("membership: unknown node role")
	// ErrMissingID means the metadata carries no node id.
	ErrMissingID = errors.New("membership: node metadata has no id")
	// ErrMetaTooLarge means the encoded metadata exceeds memberlist.MetaMaxSize.
	ErrMetaTooLarge = errors.New("membership: node metadata too large")
	// ErrInvalidConfig means Config.Validate rejected the configuration.
	ErrInvalidConfig = errors.New("membership: invalid config")
	// ErrLeft means the local node already left the pool.
	ErrLeft = errors.New("membership: node has left the pool")
	// ErrShutdown means the membership was shut down.
	ErrShutdown = errors.New("membership: shut down")
	// ErrNoPeers means a join contacted no peer.
	ErrNoPeers = errors.New("membership: no peer to join")
)
