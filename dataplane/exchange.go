package dataplane

// The data plane between two TaskManagers: every input channel a consumer TM reads from one
// producer TM travels on one Exchange stream, tagged by channel id, with credit-based flow
// control (Flink's network stack is the model). The consumer grants each channel
// channelCredit batches when it opens it and returns credit as its task takes batches; the
// producer sends a channel's batches only against its credit. A slow consumer therefore holds
// back only its own channel: the others on the stream keep flowing, and neither side buffers
// more than channelCredit batches per channel. A broken stream fails exactly the channels it
// carried (their tasks fail; the rest of the TM is untouched); the next channel to that TM opens
// a new stream. A channel whose producer runs on this TM does not touch the network
// (ChannelSet, channelset.go).

const (
	// channelCredit is the batches a consumer lets a channel have in flight: at most
	// channelCredit x batchRecords records per channel are buffered between the subpartition
	// and the task.
	channelCredit = 8
	// creditReturn: the consumer returns credit once it took this many batches.
	creditReturn = channelCredit / 2
	// maxExchangeRecords bounds the records of one Exchange message (many channels' batches
	// go out together when they are ready together), far below the message size limit.
	maxExchangeRecords = 4096
	// maxExchangeBytes bounds an Exchange message's batches in bytes too (and half the TM's
	// message size limit, when that is smaller).
	maxExchangeBytes = 1 << 20
	// maxExchangeChannels bounds the channels open on one stream.
	maxExchangeChannels = 1 << 20
)
