package plugin

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetview/fleetview/internal/hubclient"
	"github.com/fleetview/fleetview/internal/query"
)

// NewRoot is `kubectl fleet` and its commands.
func NewRoot(env Env) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-fleet",
		Short: "The fleet's memory from fleetview: an object's history and diffs, deleted objects, the change feed",
		Long: "Reads fleetview's history (the hub's /v1/changes and /v1/revisions) with the kubeconfig kubectl uses:\n" +
			"the one `fleetview kubeconfig` writes. Everything shown is what your credentials may read now.",
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl fleet"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.AddCommand(historyCmd(env), diffCmd(env), deletedCmd(env), changesCmd(env))
	return root
}

// prepare validates the options and connects.
func prepare(env Env, o *Options) (*session, error) {
	if errs := o.Validate(env.now()); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s, err := connect(o)
	if err != nil {
		return nil, err
	}
	if o.Cluster == "" {
		o.Cluster = s.hub.Cluster()
	}
	return s, nil
}

// clusterHint says how to resolve a name the hub found in several
// clusters.
func clusterHint(err error) error {
	var se *hubclient.StatusError
	if errors.As(err, &se) && strings.Contains(se.Message, "ambiguous") {
		return fmt.Errorf("%w (name one with --cluster)", err)
	}
	return err
}

// objectQuery is the query of one object's revisions.
func objectQuery(env Env, o *Options, s *session, r resource, uid string) url.Values {
	q := url.Values{}
	if r.namespaced {
		ns := o.Namespace
		if ns == "" {
			ns = s.namespace
		}
		q.Set("namespace", ns)
	}
	setIf(q, "cluster", o.Cluster)
	setIf(q, "uid", uid)
	setIf(q, "since", rfc3339(o.Since, env.now()))
	setIf(q, "until", rfc3339(o.Until, env.now()))
	return q
}

func setIf(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

func historyCmd(env Env) *cobra.Command {
	o := &Options{}
	var uid string
	cmd := &cobra.Command{
		Use:   "history RESOURCE NAME",
		Short: "An object's revisions: time, cluster, change type, field manager and operation, resourceVersion, what changed",
		Example: "  kubectl fleet history deploy web -n shop --cluster prod-eu\n" +
			"  kubectl fleet history configmap settings -n shop --since 2h -o yaml",
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			s, err := prepare(env, o)
			if err != nil {
				return err
			}
			r, err := s.resolve(args[0])
			if err != nil {
				return err
			}
			revs, err := s.revisions(c.Context(), r, args[1], objectQuery(env, o, s, r, uid), o.ChunkSize)
			if err != nil {
				return clusterHint(err)
			}
			return printHistory(env, o.Output, revs, args)
		},
	}
	o.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&uid, "uid", "", "one incarnation of the name (a name deleted and created again has several)")
	return cmd
}

func printHistory(env Env, format string, revs []Entry, args []string) error {
	if format != "" {
		return writeData(env.Stdout, format, map[string]any{"revisions": revs})
	}
	if len(revs) == 0 {
		fmt.Fprintf(env.Stderr, "No revisions of %s %s in the window.\n", args[0], args[1])
		return nil
	}
	// Without --cluster the hub answers every cluster's revisions of the
	// name: each cluster's are numbered on their own, as diff --cluster
	// numbers them.
	tw := newTable(env.Stdout, "REVISION", "TIME", "CLUSTER", "TYPE", "MANAGER", "OPERATION", "RESOURCEVERSION", "CHANGE")
	n, last := map[string]int{}, map[string]*Entry{}
	for i := range revs {
		e := &revs[i]
		n[e.Cluster]++
		prev := last[e.Cluster]
		if prev != nil && prev.UID != e.UID {
			prev = nil
		}
		last[e.Cluster] = e
		row(tw, fmt.Sprint(n[e.Cluster]), timeCell(e.Time), e.Cluster, e.Type, e.Manager, operationCell(e), e.ResourceVersion, summary(e, prev, 4))
	}
	return tw.Flush()
}

func diffCmd(env Env) *cobra.Command {
	o := &Options{}
	var uid string
	var revision int
	cmd := &cobra.Command{
		Use:   "diff RESOURCE NAME",
		Short: "A unified diff (YAML) of two revisions of an object: the last two, --revision N and the one before it, or the state at --since and the latest",
		Example: "  kubectl fleet diff deploy web -n shop\n" +
			"  kubectl fleet diff deploy web -n shop --revision 3\n" +
			"  kubectl fleet diff cm settings -n shop --since 1h",
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			if revision < 0 {
				return fmt.Errorf("%w: --revision %d: want a revision number from `kubectl fleet history` (1 is the oldest)", ErrInvalidOptions, revision)
			}
			if revision > 0 && o.Since != "" {
				return fmt.Errorf("%w: --revision and --since: choose one", ErrInvalidOptions)
			}
			// The whole window is read: --since picks the state at that
			// time, which is the last revision before it.
			since := o.Since
			o.Since = ""
			s, err := prepare(env, o)
			if err != nil {
				return err
			}
			if _, err := parseTime(since, env.now()); err != nil {
				return fmt.Errorf("%w: --since %q: want a duration back from now (1h) or an RFC 3339 time", ErrInvalidOptions, since)
			}
			r, err := s.resolve(args[0])
			if err != nil {
				return err
			}
			revs, err := s.revisions(c.Context(), r, args[1], objectQuery(env, o, s, r, uid), o.ChunkSize)
			if err != nil {
				return clusterHint(err)
			}
			out, err := diffRevisions(revs, revision, since, env)
			if err != nil {
				return fmt.Errorf("%s %s: %w", args[0], args[1], err)
			}
			_, err = fmt.Fprint(env.Stdout, out)
			return err
		},
	}
	o.AddFlags(cmd.Flags())
	cmd.Flags().IntVar(&revision, "revision", 0, "diff this revision (as \"kubectl fleet history\" numbers them without --since) with the one before it")
	cmd.Flags().StringVar(&uid, "uid", "", "one incarnation of the name")
	return cmd
}

// diffRevisions picks the two revisions and diffs them.
func diffRevisions(revs []Entry, revision int, since string, env Env) (string, error) {
	if len(revs) == 0 {
		return "", fmt.Errorf("%w: no revisions in the window", ErrNotFound)
	}
	if cl := distinct(revs, func(e *Entry) string { return e.Cluster }); len(cl) > 1 {
		return "", fmt.Errorf("%w: found in clusters %s: name one with --cluster", ErrInvalidOptions, strings.Join(cl, ", "))
	}
	if uids := distinct(revs, func(e *Entry) string { return e.UID }); len(uids) > 1 && revision == 0 {
		return "", fmt.Errorf("%w: the name had %d incarnations in the window (uids %s): pick one with --uid, or a --revision", ErrInvalidOptions, len(uids), strings.Join(uids, ", "))
	}
	to := len(revs)
	switch {
	case revision > 0:
		if revision > len(revs) {
			return "", fmt.Errorf("%w: --revision %d: the window holds %d revisions", ErrInvalidOptions, revision, len(revs))
		}
		to = revision
	case since != "":
		at, _ := parseTime(since, env.now())
		from := 0
		for i := range revs {
			if revs[i].Time.Before(at) {
				from = i + 1
			}
		}
		return diffPair(revs, from, to)
	}
	return diffPair(revs, to-1, to)
}

// diffPair diffs revision from (0: nothing) with revision to, numbered
// from 1.
func diffPair(revs []Entry, from, to int) (string, error) {
	var a *Entry
	if from > 0 {
		a = &revs[from-1]
	}
	return unifiedDiff(a, &revs[to-1], from, to)
}

// distinct lists the values of key in revs, in order of appearance.
func distinct(revs []Entry, key func(*Entry) string) []string {
	var out []string
	for i := range revs {
		if k := key(&revs[i]); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

func deletedCmd(env Env) *cobra.Command {
	o := &Options{}
	var selector string
	cmd := &cobra.Command{
		Use:   "deleted [RESOURCE]",
		Short: "Objects deleted within the window, with their last state (-o yaml: a List `kubectl apply -f` takes back)",
		Example: "  kubectl fleet deleted configmaps --since 1h -n shop\n" +
			"  kubectl fleet deleted deploy --cluster prod-eu -o yaml",
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			s, err := prepare(env, o)
			if err != nil {
				return err
			}
			q, err := feedQuery(env, o, s, args, selector, []string{query.ChangeDeleted.String()})
			if err != nil {
				return err
			}
			q.Set("objects", "true")
			out := deletedWriter(env, o.Output)
			if err := s.changes(c.Context(), q, o.ChunkSize, out.page); err != nil {
				return err
			}
			return out.close(env.Stderr, "No deleted objects found.")
		},
	}
	o.AddFlags(cmd.Flags())
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector on the objects' last labels")
	return cmd
}

// deletedWriter prints deleted objects: a table, or a v1 List of their
// last states.
func deletedWriter(env Env, format string) *feedWriter {
	return &feedWriter{
		w: bufio.NewWriter(env.Stdout), format: format, list: "items",
		wrap:   map[string]string{"apiVersion": "v1", "kind": "List"},
		header: []string{"DELETED", "CLUSTER", "RESOURCE", "NAMESPACE", "NAME", "MANAGER", "RESOURCEVERSION"},
		row: func(tw io.Writer, e *Entry) {
			row(tw, timeCell(e.Time), e.Cluster, e.GR(), e.Namespace, e.Name, e.Manager, e.ResourceVersion)
		},
		item: func(e *Entry) (any, bool) { return e.Object, len(e.Object) > 0 },
	}
}

func changesCmd(env Env) *cobra.Command {
	o := &Options{}
	var selector, res string
	var types []string
	cmd := &cobra.Command{
		Use:   "changes",
		Short: "The fleet's change feed, oldest first: every page, filtered by cluster, namespace, resource, labels and change type",
		Example: "  kubectl fleet changes --since 1h --cluster prod-eu\n" +
			"  kubectl fleet changes --resource deploy -n shop --type MODIFIED,DELETED -l app=web",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			s, err := prepare(env, o)
			if err != nil {
				return err
			}
			var want []string
			for _, t := range types {
				for _, x := range strings.Split(t, ",") {
					ct, err := query.ParseChangeType(strings.TrimSpace(x))
					if err != nil {
						return fmt.Errorf("%w: --type %q: want ADDED, MODIFIED or DELETED", ErrInvalidOptions, x)
					}
					want = append(want, ct.String())
				}
			}
			var args []string
			if res != "" {
				args = strings.Split(res, ",")
			}
			q, err := feedQuery(env, o, s, args, selector, want)
			if err != nil {
				return err
			}
			out := changesWriter(env, o.Output)
			if err := s.changes(c.Context(), q, o.ChunkSize, out.page); err != nil {
				return err
			}
			return out.close(env.Stderr, "No changes found.")
		},
	}
	o.AddFlags(cmd.Flags())
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector on the objects' labels after the change")
	cmd.Flags().StringVar(&res, "resource", "", "only these resources (comma-separated, as kubectl names them: pods, deploy, deployments.apps)")
	cmd.Flags().StringSliceVar(&types, "type", nil, "only these change types: ADDED, MODIFIED, DELETED (comma-separated)")
	return cmd
}

// feedQuery is the change feed's query. Without -n the feed spans every
// namespace: it is the fleet's.
func feedQuery(env Env, o *Options, s *session, resources []string, selector string, types []string) (url.Values, error) {
	q := url.Values{}
	for _, a := range resources {
		r, err := s.resolve(strings.TrimSpace(a))
		if err != nil {
			return nil, err
		}
		q.Add("resources", r.groupResource())
	}
	setIf(q, "namespace", o.Namespace)
	setIf(q, "clusters", o.Cluster)
	setIf(q, "labelSelector", selector)
	for _, t := range types {
		q.Add("types", t)
	}
	setIf(q, "since", rfc3339(o.Since, env.now()))
	setIf(q, "until", rfc3339(o.Until, env.now()))
	return q, nil
}

// changesWriter prints the change feed: a table, or {"changes": [...]}.
func changesWriter(env Env, format string) *feedWriter {
	return &feedWriter{
		w: bufio.NewWriter(env.Stdout), format: format, list: "changes",
		header: []string{"TIME", "CLUSTER", "TYPE", "RESOURCE", "NAMESPACE", "NAME", "MANAGER", "OPERATION", "RESOURCEVERSION"},
		row: func(tw io.Writer, e *Entry) {
			row(tw, timeCell(e.Time), e.Cluster, e.Type, e.GR(), e.Namespace, e.Name, e.Manager, operationCell(e), e.ResourceVersion)
		},
		item: func(e *Entry) (any, bool) { return e, true },
	}
}
