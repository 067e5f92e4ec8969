package app

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestHistoryOptions(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		want    []string // errors mentioning these
		enabled bool
		depth   int // the streams' messages per object
	}{
		{"off by default", nil, nil, false, 1},
		{"--history: a day, 1 GiB", []string{"--history"}, nil, true, 8},
		{"retention 0 turns it off", []string{"--history", "--history-retention", "0"}, nil, false, 1},
		{"bytes 0 turns it off", []string{"--history", "--history-max-bytes", "0"}, nil, false, 1},
		{"an hour, 64 MiB", []string{"--history", "--history-retention", "1h", "--history-max-bytes", "67108864"}, nil, true, 8},
		{"a deeper stream", []string{"--history", "--history-stream-depth", "64"}, nil, true, 64},
		{"depth without history", []string{"--history-stream-depth", "64"}, nil, false, 1},
		{"negative", []string{"--history-retention", "-1s", "--history-max-bytes", "-5"}, []string{"--history-retention -1s", "--history-max-bytes -5"}, false, 1},
		{"depth 0: the default", []string{"--history", "--history-stream-depth", "0"}, nil, true, 8},
		{"negative depth", []string{"--history", "--history-stream-depth", "-1"}, []string{"--history-stream-depth -1: must be between 0 and 1024"}, true, 0},
		{"depth too deep", []string{"--history", "--history-stream-depth", "1025"}, []string{"--history-stream-depth 1025"}, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o HistoryOptions
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			errs := o.Validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d", errs, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) || !errors.Is(errs[i], ErrInvalidOptions) {
					t.Errorf("error %q, want one mentioning %q", errs[i], w)
				}
			}
			if len(errs) > 0 {
				return
			}
			h := o.badger()
			if on := h.Retention > 0 && h.MaxBytes > 0; on != tc.enabled {
				t.Errorf("history on %v, want %v (%s)", on, tc.enabled, fmt.Sprint(h))
			}
			if d := o.streamDepth(); d != tc.depth {
				t.Errorf("stream depth %d, want %d", d, tc.depth)
			}
			if len(tc.args) == 1 && (h.Retention != 24*time.Hour || h.MaxBytes != 1<<30) {
				t.Errorf("defaults %+v", h)
			}
		})
	}
}

// RetainInterval has no flag: options built in code set it, and the
// store gets it as they set it; a negative one (the store's "no loop")
// is refused, since serve never removes what falls out of the window
// by hand.
func TestHistoryRetainInterval(t *testing.T) {
	cases := []struct {
		name     string
		interval time.Duration
		wantErr  bool
	}{
		{"0: the store's default", 0, false},
		{"a second", time.Second, false},
		{"negative", -time.Second, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := HistoryOptions{Enabled: true, Retention: time.Hour, MaxBytes: 1 << 20, RetainInterval: tc.interval}
			errs := o.Validate()
			if tc.wantErr {
				if len(errs) != 1 || !errors.Is(errs[0], ErrInvalidOptions) || !strings.Contains(errs[0].Error(), "RetainInterval -1s") {
					t.Fatalf("errors %v, want one naming RetainInterval -1s", errs)
				}
				return
			}
			if len(errs) > 0 {
				t.Fatalf("errors %v", errs)
			}
			if got := o.badger().RetainInterval; got != tc.interval {
				t.Errorf("the store's RetainInterval %s, want %s", got, tc.interval)
			}
		})
	}
}
