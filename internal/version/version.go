// Package version holds jmcluster's one version string: what `jmnode version` prints and what
// every node carries in its gossip metadata.
package version

// Version is the build's version. A release build sets it with
//
//	go build -ldflags "-X github.com/jmcluster/jmcluster/internal/version.Version=1.2.3" ./cmd/jmnode
//
// (a variable, not a constant, so that -X can set it); otherwise it is the source tree's
// version below.
var Version = "0.1.0"
