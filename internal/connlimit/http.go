package connlimit

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// Refuse answers every request of a connection l refused with refuse and
// asks for the connection to close; other requests go to next. refuse
// nil writes WriteStatus.
func (l *Limiter) Refuse(next http.Handler, refuse func(http.ResponseWriter, error)) http.Handler {
	if refuse == nil {
		refuse = WriteStatus
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := l.Refusal(r.RemoteAddr); err != nil {
			w.Header().Set("Connection", "close")
			refuse(w, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// StatusOf is the HTTP status and Kubernetes Status reason of this
// package's errors: 503 for the server's cap, 429 for a client's, 408
// for a request too slow to arrive; 0 for other errors.
func StatusOf(err error) (code int, reason string) {
	switch {
	case errors.Is(err, ErrServerFull):
		return http.StatusServiceUnavailable, "ServiceUnavailable"
	case errors.Is(err, ErrClientFull):
		return http.StatusTooManyRequests, "TooManyRequests"
	case errors.Is(err, ErrRequestTimeout):
		return http.StatusRequestTimeout, "RequestTimeout"
	}
	return 0, ""
}

// WriteStatus answers err as a Kubernetes-style Status, for servers that
// have no error table of their own (the metrics endpoint).
func WriteStatus(w http.ResponseWriter, err error) {
	code, reason := StatusOf(err)
	if code == 0 {
		code, reason = http.StatusInternalServerError, "InternalError"
	}
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": err.Error(), "reason": reason, "code": code})
}

// Deadlines renews the connection's write deadline to now+writeTimeout
// before every write and flush of a response, and once more when the
// handler returns (the server flushes what is buffered then). The write
// timeout then bounds each write, i.e. a client that stops reading, and
// not the whole answer: a watch streams for hours, a large list to a slow
// but reading client takes as long as it takes. 0 leaves next as it is.
func Deadlines(writeTimeout time.Duration, next http.Handler) http.Handler {
	if writeTimeout <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: writeTimeout}
		defer dw.renew()
		next.ServeHTTP(dw, r)
	})
}

// deadlineWriter renews the write deadline before it writes. Unwrap lets
// an http.ResponseController reach the connection's other controls.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *deadlineWriter) renew() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.d)) }

func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.renew()
	return w.ResponseWriter.Write(b)
}

// WriteHeader renews too: a 1xx answer is written at once.
func (w *deadlineWriter) WriteHeader(code int) {
	w.renew()
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Flush() { _ = w.FlushError() }

func (w *deadlineWriter) FlushError() error {
	w.renew()
	return w.rc.Flush()
}

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
