package gateway

import (
	"time"

	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// Output bounds of a client connection, from the seed: 1024 frames / 8 MiB
// in all. Notifications (the bulk: a turn streams thousands of events) go
// in the peer's notification lane (rpc.LaneOptions), the answers to the
// connection's own requests in its answer queue; the peer serves one
// request at a time and holds at most 32 more, so a small part of the
// budget is theirs. The peer's writer writes both.
const (
	replyFrames  = 64
	replyBytes   = 2 << 20 // an answer may be 1 MiB (rpc.DefaultMaxMessage)
	notifyFrames = rpc.DefaultOutboundFrames - replyFrames
	notifyBytes  = rpc.DefaultOutboundBytes - replyBytes
)

// notificationLane is the lane of every client connection. A connection
// with a quarter of its bound queued makes the fan-out wait for its
// writer, until it is down to an eighth, unless the writer has written
// nothing for 200 ms (its client is not reading: then the fan-out stops
// waiting for it until it catches up). A write takes at most 128 frames
// or 256 KiB, so that progress, answers and an overflow's close frame go
// out within a chunk.
var notificationLane = rpc.LaneOptions{
	Frames: notifyFrames, Bytes: notifyBytes,
	HighFrames: notifyFrames / 4, LowFrames: notifyFrames / 8,
	HighBytes: notifyBytes / 4, LowBytes: notifyBytes / 8,
	StallAfter:  200 * time.Millisecond,
	ChunkFrames: 128, ChunkBytes: 256 << 10,
}

// notify queues one encoded notification for s. It reports whether the
// fan-out should wait for s's writer (s.drain).
func (s *session) notify(msg []byte) (wait bool) { return s.peer.QueueNotification(msg) }

// drain waits until s's lane is down to the low mark, s ends, or its
// writer has stalled.
func (s *session) drain() { s.peer.WaitNotifications() }
