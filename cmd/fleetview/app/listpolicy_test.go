package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/queryapi/kubeapi"
)

func TestListPolicyOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		// zero starts from options built without their flags.
		zero bool
		want []string
		pol  kubeapi.ListPolicy
	}{
		{name: "defaults: the budget", pol: kubeapi.ListPolicy{BudgetObjects: kubeapi.DefaultListBudgetObjects, BudgetBytes: kubeapi.DefaultListBudgetBytes}},
		{name: "built without flags: the budget and its defaults", zero: true},
		{name: "strict", args: []string{"--list-page-policy=strict"},
			pol: kubeapi.ListPolicy{Strict: true, BudgetObjects: kubeapi.DefaultListBudgetObjects, BudgetBytes: kubeapi.DefaultListBudgetBytes}},
		{name: "a budget of its own", args: []string{"--list-budget-objects=2000", "--list-budget-bytes=1048576"},
			pol: kubeapi.ListPolicy{BudgetObjects: 2000, BudgetBytes: 1 << 20}},
		{name: "unknown policy", args: []string{"--list-page-policy=loose"}, want: []string{`--list-page-policy "loose": must be budget or strict`}},
		{name: "negative budgets", args: []string{"--list-budget-objects=-1", "--list-budget-bytes=-5"}, want: []string{"--list-budget-objects -1", "--list-budget-bytes -5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o ListPolicyOptions
			if !tc.zero {
				fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
				o.AddFlags(fs)
				if err := fs.Parse(tc.args); err != nil {
					t.Fatal(err)
				}
			}
			errs := o.Validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d", errs, len(tc.want))
			}
			for i, w := range tc.want {
				if !errors.Is(errs[i], ErrInvalidOptions) || !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %q, want one of ErrInvalidOptions naming %q", errs[i], w)
				}
			}
			if len(tc.want) == 0 {
				if got := o.policy(); got != tc.pol {
					t.Errorf("policy %+v, want %+v", got, tc.pol)
				}
				if err := o.policy().Validate(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
