package transport

// ChunkedMessageLimit is the message limit that chunked streams (TaskManager reports), paged
// answers (GetJob's executions) and batched calls (SubmitTasks) are sized against when no
// other is given: the default limit of every jmcluster server and client.
const ChunkedMessageLimit = DefaultMaxMessageSize

// ChunkMargin is what a chunk, page or batch leaves free under the message limit: room for
// gRPC framing and the few fields that are not counted exactly. 256 KiB.
const ChunkMargin = 256 << 10

// ChunkBudget returns the bytes one chunk, page or batch may fill under a message limit: the
// limit minus ChunkMargin, and never less than half the limit. A limit of 0 means
// ChunkedMessageLimit.
func ChunkBudget(limit int) int {
	if limit <= 0 {
		limit = ChunkedMessageLimit
	}
	return max(limit-ChunkMargin, limit/2)
}
