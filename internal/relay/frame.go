package relay

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetview/fleetview/internal/kubepath"
	"github.com/fleetview/fleetview/internal/natsnames"
)

// requestID is the request id of a frame received on
// natsnames.ActRequests(cluster).
func requestID(cluster, subject string) (string, bool) {
	id, ok := strings.CutPrefix(subject, natsnames.ActRequest(cluster, ""))
	if !ok || id == "" || strings.ContainsAny(id, ".*> ") {
		return "", false
	}
	return id, true
}

// Headers of the request channel's frames.
const (
	// frameHeader names what a frame is (the frame kinds above).
	frameHeader = "Fv-Act"
	// seqHeader numbers a body chunk, or acknowledges chunks up to it.
	seqHeader = "Fv-Act-Seq"
)

// Frame kinds (the frameHeader header).
const (
	// From the hub.
	kindOpen   = "open"   // the request line, headers and caller (Open)
	kindCancel = "cancel" // the hub's client went away
	// From the collector.
	kindHead  = "head"  // status and headers (Head)
	kindKeep  = "keep"  // the collector still works on the request
	kindError = "error" // the request failed before or while answering
	// Both ways: a body chunk (numbered from 1), the end of a body (its
	// chunk count), and the acknowledgement of chunks consumed up to a
	// number.
	kindData = "data"
	kindEnd  = "end"
	kindAck  = "ack"
)

// Open is a request as the hub sends it.
type Open struct {
	Method string `json:"method"`
	// Target is the request as the hub parsed, authorized and audited it:
	// typed fields, never a path string, so the collector builds the
	// member's URL from them and nothing is decoded twice (issue #43).
	Target kubepath.Request `json:"target"`
	// Query is the request's raw query: only ever the URL's query.
	Query string `json:"query,omitempty"`
	// Header holds the request headers the hub passes on.
	Header http.Header `json:"header,omitempty"`
	// ContentLength is the body's length (-1: unknown, 0: no body).
	ContentLength int64 `json:"contentLength"`
	// Caller is whom the hub authenticated; the collector acts as it.
	Caller Caller `json:"caller"`
	// TimeoutMillis bounds the request (the collector applies its own
	// maximum too).
	TimeoutMillis int64 `json:"timeoutMillis"`
	// IdleMillis is how long the hub waits for a frame before it gives the
	// request up (its Limits.IdleTimeout): the collector sends keep-alives
	// at most a third of it apart, whatever its own period.
	IdleMillis int64 `json:"idleMillis,omitempty"`
}

// Caller is the identity a forwarded request runs as.
type Caller struct {
	User   string   `json:"user"`
	Groups []string `json:"groups,omitempty"`
}

// head is the answer's status line and headers.
type head struct {
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
}

// frame builds one frame message.
func frame(subject, kind string, seq int, data []byte) *nats.Msg {
	m := &nats.Msg{Subject: subject, Header: nats.Header{frameHeader: {kind}}, Data: data}
	if seq >= 0 {
		m.Header.Set(seqHeader, strconv.Itoa(seq))
	}
	return m
}

func frameKind(m *nats.Msg) string { return m.Header.Get(frameHeader) }

func frameSeq(m *nats.Msg) (int, error) {
	n, err := strconv.Atoi(m.Header.Get(seqHeader))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s frame without a chunk number", ErrProtocol, frameKind(m))
	}
	return n, nil
}

func jsonFrame(subject, kind string, v any) (*nats.Msg, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return frame(subject, kind, -1, b), nil
}

func timeoutOf(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
