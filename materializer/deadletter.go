package materializer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/stream"
)

// The dead-letter stream is the materializers' own, no cluster's: they
// put there what they cannot apply, so its names live beside the code that
// writes it.

// DeadStream holds poison messages of every materializer, one subject per
// materializer name, with the reason in the Fv-Reason header.
const DeadStream = stream.StreamPrefix + "DEAD"

// deadStreamConfig is the dead-letter stream: a week of poison messages,
// each as large as a cluster stream's.
func deadStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: DeadStream, Subjects: []string{natsnames.SubjectRoot + ".dead.>"}, Storage: jetstream.FileStorage,
		MaxAge: 7 * 24 * time.Hour, MaxMsgSize: stream.MaxPayload, Replicas: replicas,
	}
}

// DeadSubject is the dead-letter subject of the materializer called name.
func DeadSubject(name string) string { return natsnames.SubjectRoot + ".dead." + name }

// Headers of a dead-lettered message: why, and where it came from.
const (
	HdrDeadReason  = "Fv-Reason"
	HdrDeadSubject = "Fv-Subject"
	HdrDeadStream  = "Fv-Stream"
	HdrDeadSeq     = "Fv-Seq"
	// HdrDeadTruncated is set, to the original payload's length, when the
	// dead letter keeps only the start of the payload: the message with
	// the headers above would not fit in stream.MaxPayload.
	HdrDeadTruncated = "Fv-Truncated"
)

// EnsureDeadLetterStream creates the dead-letter stream, or updates it to
// replicas copies; with replicas 0 an existing stream is kept as it is
// (an update without a replica count would move it to one replica).
func EnsureDeadLetterStream(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if replicas < 1 {
		_, err := js.Stream(ctx, DeadStream)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("dead-letter stream: %w", err)
		}
		replicas = 1
	}
	if _, err := js.CreateOrUpdateStream(ctx, deadStreamConfig(replicas)); err != nil {
		return natsnames.ReplicasError("dead-letter stream "+DeadStream, replicas, err)
	}
	return nil
}

// dropPoison dead-letters the undecodable messages, then hands the batch's
// events to apply; an event apply calls poison is dead-lettered and apply is
// called again without it. It returns the events applied.
func (m *Materializer) dropPoison(ctx context.Context, b batch, apply func([]feed.Event) error) ([]feed.Event, error) {
	for _, bad := range b.bad {
		if err := m.deadLetter(ctx, bad.msg, bad.reason); err != nil {
			return nil, err
		}
	}
	evs, msgs := b.evs, b.msgs
	for {
		err := apply(evs)
		var pe *PoisonError
		if errors.As(err, &pe) {
			i := sort.Search(len(evs), func(i int) bool { return evs[i].Seq >= pe.Seq })
			if i == len(evs) || evs[i].Seq != pe.Seq {
				return nil, &sinkError{fmt.Errorf("sink reported poison seq %d not in the batch: %w", pe.Seq, err)}
			}
			if err := m.deadLetter(ctx, msgs[i], pe); err != nil {
				return nil, err
			}
			evs = append(evs[:i:i], evs[i+1:]...)
			msgs = append(msgs[:i:i], msgs[i+1:]...)
			continue
		}
		if err != nil {
			return nil, &sinkError{fmt.Errorf("apply up to seq %d: %w", b.seq, err)}
		}
		return evs, nil
	}
}

// deadLetter keeps a poison message with its reason and moves on.
func (m *Materializer) deadLetter(ctx context.Context, msg jetstream.Msg, reason error) error {
	md, _ := msg.Metadata()
	dl := nats.NewMsg(DeadSubject(m.cfg.Name))
	dl.Data = msg.Data()
	dl.Header.Set(HdrDeadReason, reason.Error())
	dl.Header.Set(HdrDeadSubject, msg.Subject())
	if md != nil {
		dl.Header.Set(HdrDeadStream, md.Stream)
		dl.Header.Set(HdrDeadSeq, fmt.Sprint(md.Sequence.Stream))
		// Hubs sharing a NATS cluster each meet the same poison message:
		// within the duplicate window it is kept once per materializer
		// name, not once per hub.
		dl.Header.Set(nats.MsgIdHdr, m.cfg.Name+"/"+md.Stream+"/"+fmt.Sprint(md.Sequence.Stream))
	}
	// A collector may publish a poison message up to the largest size the
	// stream takes; with the headers above it would not fit, its dead
	// letter would be refused, and its cluster's ingest would stop there.
	// The dead letter keeps what fits and says how long the payload was.
	if limit := deadLetterRoom(m.cfg.NATS.MaxPayload(), dl.Header); len(dl.Data) > limit {
		dl.Header.Set(HdrDeadTruncated, fmt.Sprint(len(dl.Data)))
		dl.Data = dl.Data[:max(0, limit-64)] // and room for that header
	}
	if _, err := m.js.PublishMsg(ctx, dl); err != nil {
		return fmt.Errorf("dead-letter %s: %w", msg.Subject(), err)
	}
	m.metrics.DeadLettered.Add(1)
	m.log.Warn("poison event dead-lettered", "subject", msg.Subject(), "reason", reason)
	return nil
}

// deadLetterRoom is how many payload bytes a dead letter with headers h
// can carry: the smaller of the connection's and the dead-letter stream's
// message limits, less the headers' encoding.
func deadLetterRoom(connMax int64, h nats.Header) int {
	room := int64(stream.MaxPayload)
	if connMax > 0 && connMax < room {
		room = connMax
	}
	n := int64(len("NATS/1.0\r\n\r\n"))
	for k, vs := range h {
		for _, v := range vs {
			n += int64(len(k) + len(v) + 4) // "k: v\r\n"
		}
	}
	return int(room - n)
}
