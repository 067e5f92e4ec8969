package app

import (
	"testing"

	"github.com/spf13/pflag"
)

func TestIndexOptions(t *testing.T) {
	cases := []struct {
		name          string
		args          []string
		relations     bool
		valueIndexLen int
	}{
		{"off by default", nil, false, 0},
		{"--relations", []string{"--relations"}, true, 0},
		{"--count-index", []string{"--count-index"}, false, 3},
		{"both", []string{"--relations", "--count-index"}, true, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o IndexOptions
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			noRel, values := o.badger()
			if noRel == tc.relations {
				t.Errorf("relations kept %v, want %v", !noRel, tc.relations)
			}
			// Off must be an empty list, not nil: the store reads nil as
			// its default index.
			if values == nil || len(values) != tc.valueIndexLen {
				t.Errorf("value index %v, want %d dimensions (non-nil)", values, tc.valueIndexLen)
			}
		})
	}
}
