package kubeapi

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxLimitedCallers bounds the callers whose forwarding rate is followed;
// past it, callers whose buckets are full again are forgotten first.
const maxLimitedCallers = 10000

// callerLimits is the forwarding rate of each authenticated caller (issue
// #30): a member's apiserver has its own limits per user, but every
// forwarded request reaches it as the collector's impersonation, through
// one channel per cluster that other callers share.
type callerLimits struct {
	rate  rate.Limit
	burst int

	mu      sync.Mutex
	callers map[string]*callerBucket
}

type callerBucket struct {
	l    *rate.Limiter
	seen time.Time
}

func newCallerLimits(perSecond float64, burst int) *callerLimits {
	return &callerLimits{rate: rate.Limit(perSecond), burst: burst, callers: map[string]*callerBucket{}}
}

// allow takes one request of user's; false when the user is over its rate.
func (c *callerLimits) allow(user string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.callers[user]
	if b == nil {
		if len(c.callers) >= maxLimitedCallers {
			c.forgetIdle(now)
		}
		b = &callerBucket{l: rate.NewLimiter(c.rate, c.burst)}
		c.callers[user] = b
	}
	b.seen = now
	return b.l.AllowN(now, 1)
}

// forgetIdle drops the callers idle long enough for their buckets to be
// full again: forgetting them changes nothing. It runs only when the map
// is full, so its cost is shared by the maxLimitedCallers calls before it.
func (c *callerLimits) forgetIdle(now time.Time) {
	refill := time.Duration(float64(c.burst) / float64(c.rate) * float64(time.Second))
	for u, b := range c.callers {
		if now.Sub(b.seen) > refill {
			delete(c.callers, u)
		}
	}
}
