package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// waitJetStream waits until JetStream answers on nc. A member of a
// cluster starting with the others has no JetStream until a majority of
// them elected a meta leader, and a hub connecting to a cluster in the
// middle of an election has none for a few seconds: neither is a reason
// to give up. Only ctx ends the wait.
func waitJetStream(ctx context.Context, nc *nats.Conn, log *slog.Logger) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	wait := 250 * time.Millisecond
	for start, logged := time.Now(), time.Now(); ; {
		// A short attempt: without a meta leader the request is dropped,
		// not answered, and a long one would sit out the election.
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), err)
		}
		if time.Since(logged) > 5*time.Second {
			logged = time.Now()
			log.Warn("waiting for JetStream (a NATS cluster needs a majority of its members up)", "err", err, "waited", time.Since(start).Round(time.Second))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// jetStreamSettle bounds how long creating fleetview's streams and
// buckets is retried at start. Right after a cluster elects its meta
// leader, a replicated stream's creation can time out or find too few
// current peers, and every hub of the cluster creates the same buckets
// at once; a minute covers that, and a cluster that still cannot create
// them has a problem the error names.
const jetStreamSettle = time.Minute

// retryJetStream runs f until it succeeds, ctx ends or jetStreamSettle
// passes, each attempt bounded (a request JetStream drops while it has no
// leader would otherwise wait for ctx). A single server refusing replicas
// is final at once.
func retryJetStream(ctx context.Context, log *slog.Logger, what string, f func(context.Context) error) error {
	wait := 250 * time.Millisecond
	start := time.Now()
	for {
		actx, cancel := context.WithTimeout(ctx, jetStreamAttempt)
		err := f(actx)
		cancel()
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return errors.Join(ctx.Err(), err)
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jsReplicasNotSupported, time.Since(start) > jetStreamSettle:
			return err
		}
		log.Warn("JetStream not ready yet; retrying", "what", what, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// jetStreamAttempt bounds one attempt. Creating a replicated stream takes
// well under a second on a settled cluster, but when every hub of a new
// cluster creates the same stream at once, JetStream answers only one of
// the equal requests: the others wait for their timeout and find the
// stream on the next attempt. A short attempt keeps that from adding ten
// seconds per bucket to a cluster's first start.
const jetStreamAttempt = 4 * time.Second

// jsReplicasNotSupported is JetStream's error code for replicas asked of
// a server that is not in a cluster.
const jsReplicasNotSupported jetstream.ErrorCode = 10074
