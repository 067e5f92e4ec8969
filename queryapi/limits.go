package queryapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/connlimit"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/queryapi/apierr"
	"github.com/fleetview/fleetview/queryapi/rest"
)

// Limits bound what clients can make the server hold. A zero cap is no
// cap (what a Config built by hand, e.g. by a benchmark, gets); the
// command line sets the defaults (cmd/fleetview/app, LimitOptions).
type Limits struct {
	// MaxListObjects is the most objects one List or Search answer holds.
	// A larger limit, or none (0), is answered with a page of this size
	// and a continue token, not refused: kube-apiserver also may return
	// fewer items than the limit, and client-go's pager (informers,
	// kubectl's chunked get) follows continue until the list ends, so a
	// full list of any size keeps working while no single answer has to
	// be built in memory whole.
	MaxListObjects int64
	// MaxWatches bounds the watches open at once on the server (every
	// protocol); one more is 429 TooManyRequests.
	MaxWatches int
	// MaxWatchesPerClient bounds the watches one client holds at once:
	// an authenticated subject, or a remote address when authentication
	// is off (every client behind one proxy shares it).
	MaxWatchesPerClient int
	// MaxRequestBytes bounds a request: a REST body is refused (413)
	// before it is read whole or decoded, which the gateway does before
	// the interceptors authenticate; a gRPC message is refused by gRPC
	// (RESOURCE_EXHAUSTED). 0: DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// MaxConcurrentStreams bounds the concurrent calls of one gRPC (HTTP/2)
	// connection; further calls wait for a free stream. 0: no cap.
	MaxConcurrentStreams uint32
	// KeepaliveMinTime is the shortest ping interval a gRPC client may use;
	// a client pinging more often is disconnected (GOAWAY
	// too_many_pings). 0: DefaultKeepaliveMinTime.
	KeepaliveMinTime time.Duration
	// KeepaliveTime is how long a gRPC connection may be silent before the
	// server pings it, and KeepaliveTimeout how long it waits for the
	// answer before closing it, so a vanished client's watches end and
	// release their quota. 0: the defaults.
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
	// Connections, when set, caps the connections of both ports (and
	// whatever else shares it), in all and per client address; a
	// connection over a cap is answered with its refusal and closed (HTTP
	// 503 or 429, gRPC UNAVAILABLE or RESOURCE_EXHAUSTED). The listeners
	// must be its own (Connections.Listen), beneath any TLS: the HTTP
	// server handshakes only a *tls.Conn it accepts itself.
	Connections *connlimit.Limiter
	// HTTPReadHeaderTimeout bounds reading a request's headers (0:
	// DefaultReadHeaderTimeout), HTTPReadTimeout its headers and body (a
	// slow body is 408 and the connection closes), HTTPIdleTimeout a
	// keep-alive connection between requests, HTTPWriteTimeout each write
	// of an answer (renewed per write, so watches stream on; a client that
	// stops reading is cut). 0: no bound (HTTPIdleTimeout 0 takes
	// HTTPReadTimeout, as http.Server does).
	HTTPReadHeaderTimeout time.Duration
	HTTPReadTimeout       time.Duration
	HTTPWriteTimeout      time.Duration
	HTTPIdleTimeout       time.Duration
	// GRPCConnectionTimeout bounds a gRPC connection's setup (TLS and
	// HTTP/2 handshakes); GRPCMaxConnectionIdle closes (GOAWAY) a gRPC
	// connection without calls for that long. 0: gRPC's defaults (120s;
	// never).
	GRPCConnectionTimeout time.Duration
	GRPCMaxConnectionIdle time.Duration
}

// Defaults of the limits that are never off.
const (
	// DefaultMaxRequestBytes fits any ResourceRegistry many times over.
	DefaultMaxRequestBytes  = 1 << 20
	DefaultKeepaliveMinTime = 10 * time.Second
	DefaultKeepaliveTime    = time.Minute
	DefaultKeepaliveTimeout = 20 * time.Second
	// DefaultReadHeaderTimeout is what a Config built by hand gets.
	DefaultReadHeaderTimeout = 10 * time.Second
)

func (l *Limits) setDefaults() {
	if l.MaxRequestBytes <= 0 {
		l.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if l.KeepaliveMinTime <= 0 {
		l.KeepaliveMinTime = DefaultKeepaliveMinTime
	}
	if l.KeepaliveTime <= 0 {
		l.KeepaliveTime = DefaultKeepaliveTime
	}
	if l.KeepaliveTimeout <= 0 {
		l.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	if l.HTTPReadHeaderTimeout <= 0 {
		l.HTTPReadHeaderTimeout = DefaultReadHeaderTimeout
	}
}

// pageLimit is the limit a List or Search is served with: the client's,
// capped by MaxListObjects (none asked is the cap too).
func (l Limits) pageLimit(asked int64) int64 {
	if l.MaxListObjects > 0 && (asked == 0 || asked > l.MaxListObjects) {
		return l.MaxListObjects
	}
	return asked
}

// grpcOptions are the gRPC server options that enforce the limits.
func (l Limits) grpcOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(l.MaxRequestBytes)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: l.KeepaliveTime, Timeout: l.KeepaliveTimeout, MaxConnectionIdle: l.GRPCMaxConnectionIdle}),
	}
	if l.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(l.MaxConcurrentStreams))
	}
	if l.GRPCConnectionTimeout > 0 {
		opts = append(opts, grpc.ConnectionTimeout(l.GRPCConnectionTimeout))
	}
	if lim := l.Connections; lim != nil {
		// A refused connection's calls fail with its refusal: gRPC has
		// no answer before its first call, and a silent close would read
		// as a network fault the client retries at once.
		opts = append(opts, grpc.InTapHandle(func(ctx context.Context, _ *tap.Info) (context.Context, error) {
			if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
				if err := lim.Refusal(p.Addr.String()); err != nil {
					return nil, apierr.ToStatus(err)
				}
			}
			return ctx, nil
		}))
	}
	return opts
}

// clientOf names the caller for per-client limits: the subject the Guard
// authenticated, else the remote host (gRPC peer, or the HTTP client for
// calls made in-process, see withPeer). Empty when neither is known.
func clientOf(ctx context.Context) string {
	if u, ok := auth.UserFrom(ctx); ok {
		return "user " + u.Name
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		host := p.Addr.String()
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		return "address " + host
	}
	return ""
}

// httpAddr is an HTTP client's remote address as a net.Addr.
type httpAddr string

func (a httpAddr) Network() string { return "tcp" }
func (a httpAddr) String() string  { return string(a) }

// withPeer makes an HTTP request's remote address the peer of the
// in-process gRPC calls it leads to (their context is the request's), so
// per-client limits know REST and Kubernetes clients when authentication
// is off. It carries no AuthInfo: only the gRPC port sees client
// certificates.
func withPeer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.RemoteAddr != "" {
			if _, ok := peer.FromContext(r.Context()); !ok {
				r = r.WithContext(peer.NewContext(r.Context(), &peer.Peer{Addr: httpAddr(r.RemoteAddr)}))
			}
		}
		h.ServeHTTP(w, r)
	})
}

// limitBody refuses a request body over max bytes with 413, reading at most
// max+1 bytes of it, before any handler decodes it: the gateway decodes a
// registry before the interceptors authenticate the call.
func limitBody(max int64, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		tooLarge := func() {
			// The rest of the body stays unread: close the connection
			// rather than drain it.
			w.Header().Set("Connection", "close")
			rest.WriteError(w, fmt.Errorf("%w: the request body exceeds %d bytes", query.ErrRequestTooLarge, max))
		}
		if r.ContentLength > max {
			tooLarge()
			return
		}
		b, err := io.ReadAll(io.LimitReader(r.Body, max+1))
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The server's read timeout: the client is too slow, or
			// holding the connection on purpose. The rest of the body is
			// not read.
			w.Header().Set("Connection", "close")
			rest.WriteError(w, fmt.Errorf("%w: the request body did not arrive within the read timeout (--http-read-timeout)", connlimit.ErrRequestTimeout))
			return
		}
		if err != nil {
			rest.WriteError(w, fmt.Errorf("%w: reading the request body: %v", query.ErrInvalid, err))
			return
		}
		if int64(len(b)) > max {
			tooLarge()
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		h.ServeHTTP(w, r)
	})
}

// watchLimiter counts the open watches, in all and per client.
type watchLimiter struct {
	max, perClient int // 0: no cap

	mu       sync.Mutex
	total    int
	byClient map[string]int
}

func newWatchLimiter(max, perClient int) *watchLimiter {
	return &watchLimiter{max: max, perClient: perClient, byClient: map[string]int{}}
}

// acquire counts one more watch of client, or refuses it with
// ErrTooManyRequests; release undoes it once the watch ends.
func (l *watchLimiter) acquire(client string) (release func(), err error) {
	if l == nil {
		return func() {}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.total >= l.max {
		return nil, fmt.Errorf("%w: the server holds %d watches, its limit (--max-watches); retry later", query.ErrTooManyRequests, l.total)
	}
	if n := l.byClient[client]; l.perClient > 0 && n >= l.perClient {
		return nil, fmt.Errorf("%w: %s holds %d watches, the limit per client (--max-watches-per-client); end one or retry later", query.ErrTooManyRequests, clientName(client), n)
	}
	l.total++
	l.byClient[client]++
	var once sync.Once
	return func() { once.Do(func() { l.release(client) }) }, nil
}

func (l *watchLimiter) release(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byClient[client]--; l.byClient[client] <= 0 {
		delete(l.byClient, client)
	}
}

// open is the number of watches held, in all and by client.
func (l *watchLimiter) open(client string) (total, ofClient int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, l.byClient[client]
}

func clientName(c string) string {
	if c == "" {
		return "this client"
	}
	return c
}
