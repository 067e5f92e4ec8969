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
	}{
		{"off by default", nil, nil, false},
		{"--history: a day, 1 GiB", []string{"--history"}, nil, true},
		{"retention 0 turns it off", []string{"--history", "--history-retention", "0"}, nil, false},
		{"bytes 0 turns it off", []string{"--history", "--history-max-bytes", "0"}, nil, false},
		{"an hour, 64 MiB", []string{"--history", "--history-retention", "1h", "--history-max-bytes", "67108864"}, nil, true},
		{"negative", []string{"--history-retention", "-1s", "--history-max-bytes", "-5"}, []string{"--history-retention -1s", "--history-max-bytes -5"}, false},
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
			if len(tc.args) == 1 && (h.Retention != 24*time.Hour || h.MaxBytes != 1<<30) {
				t.Errorf("defaults %+v", h)
			}
		})
	}
}
