package materializer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/stream"
)

// delivery is a message a consumer delivered, as the fetching and
// applying stages use it (a jetstream.Msg is one too).
type delivery interface {
	Subject() string
	Data() []byte
	Metadata() (*jetstream.MsgMetadata, error)
	Ack() error
}

// pullTimeout bounds one pull: a no-wait pull is answered at once by the
// consumer's leader, so one that is not (a leader being elected) fails,
// and the consumer is made afresh on the next discovery round.
const pullTimeout = 10 * time.Second

// pullRequest is JetStream's pull request (CONSUMER.MSG.NEXT). nats.go's
// Consumer.FetchNoWait cannot bound the bytes and its Fetch with a byte
// bound waits for its whole batch or its expiry; this asks for what the
// stream holds now, up to batch messages and maxBytes bytes, and is
// answered at once.
type pullRequest struct {
	Batch    int  `json:"batch"`
	MaxBytes int  `json:"max_bytes,omitempty"`
	NoWait   bool `json:"no_wait"`
}

// pull takes what cluster's consumer has for it now: up to batch messages
// and maxBytes bytes (maxBytes is at least the largest message, so a
// pull always makes progress).
func (m *Materializer) pull(ctx context.Context, cluster string, batch, maxBytes int) ([]delivery, error) {
	nc := m.cfg.NATS
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, err := json.Marshal(pullRequest{Batch: batch, MaxBytes: maxBytes, NoWait: true})
	if err != nil {
		return nil, err
	}
	if err := nc.PublishRequest(stream.APISubject("CONSUMER.MSG.NEXT", stream.StreamName(cluster), m.cfg.Durable), inbox, req); err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	var out []delivery
	received := 0
	for len(out) < batch && received < maxBytes {
		msg, err := sub.NextMsgWithContext(pctx)
		if err != nil {
			return nil, fmt.Errorf("pull from %s after %d messages: %w", stream.StreamName(cluster), len(out), err)
		}
		if status := msg.Header.Get("Status"); status != "" && len(msg.Data) == 0 {
			switch status {
			case "404", "408": // no (more) messages, or the pull's end
				return out, nil
			case "409":
				switch msg.Header.Get("Description") {
				case "Message Size Exceeds MaxBytes":
					return out, nil // the next one is left for the next pull
				case "Batch Completed":
					// The server counted the request's batch as
					// delivered (it sends this after a batch that left
					// bytes unused); the pull is over, not failed. Taken
					// for an error, it stopped the consumer at every
					// pull of a busy R3 stream (the collector
					// benchmark's scale-out phase never finished).
					return out, nil
				}
			case "100": // a heartbeat: not asked for, harmless
				continue
			}
			return nil, fmt.Errorf("pull from %s: status %s %s", stream.StreamName(cluster), status, msg.Header.Get("Description"))
		}
		md, err := msg.Metadata()
		if err != nil {
			return nil, fmt.Errorf("pull from %s: %w", stream.StreamName(cluster), err)
		}
		out = append(out, pulled{msg: msg, md: &jetstream.MsgMetadata{
			Sequence:     jetstream.SequencePair{Stream: md.Sequence.Stream, Consumer: md.Sequence.Consumer},
			NumDelivered: md.NumDelivered, NumPending: md.NumPending, Timestamp: md.Timestamp,
			Stream: md.Stream, Consumer: md.Consumer, Domain: md.Domain,
		}})
		received += msg.Size() // as the server counts it
	}
	return out, nil
}

// pulled is a message of a pull.
type pulled struct {
	msg *nats.Msg
	md  *jetstream.MsgMetadata
}

func (p pulled) Subject() string                           { return p.msg.Subject }
func (p pulled) Data() []byte                              { return p.msg.Data }
func (p pulled) Metadata() (*jetstream.MsgMetadata, error) { return p.md, nil }

// Ack acknowledges the message and, the consumer's policy being AckAll,
// every one before it.
func (p pulled) Ack() error { return p.msg.Respond([]byte("+ACK")) }
