package app

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/queryapi/kubeapi"
)

// List page policies of the Kubernetes API (--list-page-policy).
const (
	ListPagesBudget = "budget"
	ListPagesStrict = "strict"
)

// ListPolicyOptions say how many objects one list answer of the Kubernetes
// API holds (kubeapi.ListPolicy; docs/api.md, "Paged lists"). The REST and
// gRPC lists keep their own pages (--max-list-objects).
type ListPolicyOptions struct {
	// Policy is ListPagesBudget (a paged kubectl or informer gets up to
	// the budget an answer; also "") or ListPagesStrict (at most limit).
	Policy        string
	BudgetObjects int64
	BudgetBytes   int64
}

// AddFlags registers the flags.
func (o *ListPolicyOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Policy, "list-page-policy", ListPagesBudget,
		"how the Kubernetes API pages lists: budget (a list asking for 500 or more objects a page, kubectl's and client-go's default, or for no limit, gets every object up to the budget in one answer, with an exact continue token after it, as the API's limit contract allows) or strict (at most limit, for clients that count items)")
	fs.Int64Var(&o.BudgetObjects, "list-budget-objects", kubeapi.DefaultListBudgetObjects,
		"most objects one Kubernetes API list answer holds under --list-page-policy=budget")
	fs.Int64Var(&o.BudgetBytes, "list-budget-bytes", kubeapi.DefaultListBudgetBytes,
		"bytes after which one Kubernetes API list answer ends under --list-page-policy=budget (at the next read page of 5,000 objects)")
}

// Validate reports every problem at once.
func (o *ListPolicyOptions) Validate() []error {
	var errs []error
	if o.Policy != "" && o.Policy != ListPagesBudget && o.Policy != ListPagesStrict {
		errs = append(errs, fmt.Errorf("%w: --list-page-policy %q: must be %s or %s", ErrInvalidOptions, o.Policy, ListPagesBudget, ListPagesStrict))
	}
	if o.BudgetObjects < 0 {
		errs = append(errs, fmt.Errorf("%w: --list-budget-objects %d must not be negative (0: the default, %d)", ErrInvalidOptions, o.BudgetObjects, kubeapi.DefaultListBudgetObjects))
	}
	if o.BudgetBytes < 0 {
		errs = append(errs, fmt.Errorf("%w: --list-budget-bytes %d must not be negative (0: the default, %d)", ErrInvalidOptions, o.BudgetBytes, kubeapi.DefaultListBudgetBytes))
	}
	return errs
}

// policy is the Kubernetes API's list policy. Options built without their
// flags (zero: "" and 0) get the budget policy and its defaults.
func (o *ListPolicyOptions) policy() kubeapi.ListPolicy {
	return kubeapi.ListPolicy{Strict: o.Policy == ListPagesStrict, BudgetObjects: o.BudgetObjects, BudgetBytes: o.BudgetBytes}
}
