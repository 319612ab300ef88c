// Package examples holds the example job specs (the protobuf JSON mapping of a JobGraph),
// embedded so that `jmnode demo` runs the very file users read.
package examples

import "embed"

// Specs are the *.json files of this directory.
//
//go:embed *.json
var Specs embed.FS

// StreamingChecksum is the demo's job: a 3 x 3 x 3 streaming chain into checksum sinks.
const StreamingChecksum = "streaming-checksum.json"

// ClicksToPostgres and ClicksToNats are demo-pipeline's jobs: click events from a JetStream
// stream, per user and minute, into a PostgreSQL table or a JetStream stream.
const (
	ClicksToPostgres = "clicks-to-postgres.json"
	ClicksToNats     = "clicks-to-nats.json"
)
