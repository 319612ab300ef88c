package netdelay

import (
	"container/heap"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
)

// packetMessage is the body of an NFQNL_MSG_PACKET as the kernel sends it in copy mode meta.
func packetMessage(id uint32) []byte {
	hdr := make([]byte, 7) // nfqnl_msg_packet_hdr: be32 id, be16 hw_protocol, u8 hook
	binary.BigEndian.PutUint32(hdr, id)
	binary.BigEndian.PutUint16(hdr[4:], 0x0800)
	hdr[6] = 3 // NF_INET_LOCAL_OUT
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(6, []byte{0, 0, 0, 2}) // NFQA_IFINDEX_OUTDEV before the header: order is not assumed
	ae.Bytes(attrPacketHdr, hdr)
	b, _ := ae.Encode()
	return append([]byte{2, 0, 0, 7}, b...)
}

func TestPacketID(t *testing.T) {
	id, err := PacketID(packetMessage(0xdeadbeef))
	if err != nil || id != 0xdeadbeef {
		t.Fatalf("PacketID = %x, %v", id, err)
	}
	bad := map[string][]byte{
		"shorter than": {2, 0},
		"without":      {2, 0, 0, 7},
		"at least 4":   append([]byte{2, 0, 0, 7}, encode(attrPacketHdr, []byte{1, 2})...),
		"attributes":   {2, 0, 0, 7, 9, 0, 1},
	}
	for want, data := range bad {
		if _, err := PacketID(data); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("PacketID(%v) = %v, want an error saying %q", data, err, want)
		}
	}
}

func encode(typ uint16, data []byte) []byte {
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(typ, data)
	b, _ := ae.Encode()
	return b
}

func TestVerdictMessage(t *testing.T) {
	m := verdict(msgVerdict, 7, verdictAccept, 42)
	if m.Header.Type != netlink.HeaderType(3<<8|1) || m.Header.Flags != netlink.Request {
		t.Fatalf("header %+v", m.Header)
	}
	// nfgenmsg (AF_UNSPEC, v0, queue 7 big-endian), then NFQA_VERDICT_HDR: len 12, type 2,
	// be32 verdict, be32 id.
	want := []byte{0, 0, 0, 7, 12, 0, 2, 0, 0, 0, 0, 1, 0, 0, 0, 42}
	if string(m.Data) != string(want) {
		t.Fatalf("verdict body % x, want % x", m.Data, want)
	}
}

func TestParseProc(t *testing.T) {
	text := "    0  12345     0 2 65535     0     0        0  1\n    7 2851214931   12 1 65535     3     5    70123  1\n"
	ks, err := ParseProc(text, 7)
	if err != nil {
		t.Fatal(err)
	}
	want := KernelStats{Queue: 7, PortID: 2851214931, Held: 12, CopyMode: 1, CopyRange: 65535, QueueDrops: 3, UserDrops: 5, IDSequence: 70123}
	if ks != want {
		t.Fatalf("ParseProc = %+v", ks)
	}
	if _, err := ParseProc(text, 9); err == nil || !strings.Contains(err.Error(), "not bound") {
		t.Fatalf("missing queue: %v", err)
	}
	if _, err := ParseProc("7 1 2\n", 7); err == nil || !strings.Contains(err.Error(), "want at least 8") {
		t.Fatalf("short line: %v", err)
	}
	if _, err := ParseProc("7 1 2 x 5 6 7 8 1\n", 7); err == nil || !strings.Contains(err.Error(), "field 4") {
		t.Fatalf("bad number: %v", err)
	}
}

func TestShapeValidate(t *testing.T) {
	ok := Shape{Delay: 100 * time.Millisecond, Jitter: 20 * time.Millisecond, LossPct: 30}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for want, s := range map[string]Shape{
		"negative":     {Delay: -time.Millisecond},
		"exceed":       {Delay: time.Millisecond, Jitter: 2 * time.Millisecond},
		"within 0-100": {LossPct: 101},
	} {
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%+v) = %v, want %q", s, err, want)
		}
	}
}

func TestHoldHeapOrdersByDueThenID(t *testing.T) {
	t0 := time.Unix(100, 0)
	var h holdHeap
	for _, x := range []hold{{due: t0.Add(3), id: 1}, {due: t0.Add(1), id: 5}, {due: t0.Add(1), id: 4}, {due: t0, id: 0xffffffff}} {
		heap.Push(&h, x)
	}
	var got []uint32
	for h.Len() > 0 {
		got = append(got, heap.Pop(&h).(hold).id)
	}
	if fmt.Sprint(got) != fmt.Sprint([]uint32{0xffffffff, 4, 5, 1}) {
		t.Fatalf("order %v", got)
	}
}
