package kubeapi

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// clusterAnnotation names the member cluster an object was cached from.
const clusterAnnotation = "fleetview.io/cluster"

// printer renders the kind-specific cells of one object (after CLUSTER and
// NAME) from its JSON.
type printer struct {
	columns []metav1.TableColumnDefinition
	cells   func(raw []byte, now time.Time) ([]any, error)
}

func col(name, typ string, priority int32, desc string) metav1.TableColumnDefinition {
	d := metav1.TableColumnDefinition{Name: name, Type: typ, Priority: priority, Description: desc}
	if name == "Name" {
		d.Format = "name"
	}
	return d
}

func age(m metav1.ObjectMeta, now time.Time) string {
	if m.CreationTimestamp.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(m.CreationTimestamp.Time))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// printers are hand-written after kubectl's (k8s.io/kubernetes printers)
// for the common kinds; every other kind prints NAME and AGE.
var printers = map[string]printer{
	"Pod": {
		columns: []metav1.TableColumnDefinition{col("Ready", "string", 0, "containers ready"), col("Status", "string", 0, "pod status"),
			col("Restarts", "string", 0, "container restarts"), col("Age", "string", 0, "age"), col("IP", "string", 1, "pod IP"),
			col("Node", "string", 1, "node"), col("Nominated Node", "string", 1, "nominated node"), col("Readiness Gates", "string", 1, "readiness gates")},
		cells: func(raw []byte, now time.Time) ([]any, error) {
			var p corev1.Pod
			if err := json.Unmarshal(raw, &p); err != nil {
				return nil, err
			}
			ready, restarts := 0, int32(0)
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Ready {
					ready++
				}
				restarts += cs.RestartCount
			}
			gates := "<none>"
			if n := len(p.Spec.ReadinessGates); n > 0 {
				ok := 0
				for _, g := range p.Spec.ReadinessGates {
					for _, c := range p.Status.Conditions {
						if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
							ok++
						}
					}
				}
				gates = fmt.Sprintf("%d/%d", ok, n)
			}
			return []any{fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers)), podStatus(&p), strconv.Itoa(int(restarts)), age(p.ObjectMeta, now),
				orNone(p.Status.PodIP), orNone(p.Spec.NodeName), orNone(p.Status.NominatedNodeName), gates}, nil
		},
	},
	"Deployment": {
		columns: []metav1.TableColumnDefinition{col("Ready", "string", 0, "ready replicas"), col("Up-to-date", "integer", 0, "updated replicas"),
			col("Available", "integer", 0, "available replicas"), col("Age", "string", 0, "age"), col("Containers", "string", 1, "containers"),
			col("Images", "string", 1, "images"), col("Selector", "string", 1, "selector")},
		cells: func(raw []byte, now time.Time) ([]any, error) {
			var d appsv1.Deployment
			if err := json.Unmarshal(raw, &d); err != nil {
				return nil, err
			}
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			var names, images []string
			for _, c := range d.Spec.Template.Spec.Containers {
				names, images = append(names, c.Name), append(images, c.Image)
			}
			sel := "<none>"
			if d.Spec.Selector != nil {
				if s, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil {
					sel = s.String()
				}
			}
			return []any{fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, want), int64(d.Status.UpdatedReplicas), int64(d.Status.AvailableReplicas),
				age(d.ObjectMeta, now), strings.Join(names, ","), strings.Join(images, ","), sel}, nil
		},
	},
	"Service": {
		columns: []metav1.TableColumnDefinition{col("Type", "string", 0, "type"), col("Cluster-IP", "string", 0, "cluster IP"),
			col("External-IP", "string", 0, "external IPs"), col("Port(s)", "string", 0, "ports"), col("Age", "string", 0, "age"),
			col("Selector", "string", 1, "selector")},
		cells: func(raw []byte, now time.Time) ([]any, error) {
			var s corev1.Service
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, err
			}
			ext := strings.Join(s.Spec.ExternalIPs, ",")
			for _, in := range s.Status.LoadBalancer.Ingress {
				ext = strings.TrimPrefix(ext+","+in.IP+in.Hostname, ",")
			}
			if ext == "" {
				ext = "<none>"
				if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
					ext = "<pending>"
				}
			}
			var ports []string
			for _, p := range s.Spec.Ports {
				if p.NodePort != 0 {
					ports = append(ports, fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol))
				} else {
					ports = append(ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
				}
			}
			var sel []string
			for k, v := range s.Spec.Selector {
				sel = append(sel, k+"="+v)
			}
			sort.Strings(sel)
			return []any{string(s.Spec.Type), orNone(s.Spec.ClusterIP), ext, orNone(strings.Join(ports, ",")), age(s.ObjectMeta, now),
				orNone(strings.Join(sel, ","))}, nil
		},
	},
	"ConfigMap": {
		columns: []metav1.TableColumnDefinition{col("Data", "integer", 0, "data keys"), col("Age", "string", 0, "age")},
		cells: func(raw []byte, now time.Time) ([]any, error) {
			var c corev1.ConfigMap
			if err := json.Unmarshal(raw, &c); err != nil {
				return nil, err
			}
			return []any{int64(len(c.Data) + len(c.BinaryData)), age(c.ObjectMeta, now)}, nil
		},
	},
	"Secret": {
		columns: []metav1.TableColumnDefinition{col("Type", "string", 0, "type"), col("Data", "integer", 0, "data keys (0 when not cached)"), col("Age", "string", 0, "age")},
		cells: func(raw []byte, now time.Time) ([]any, error) {
			var s corev1.Secret
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, err
			}
			return []any{string(s.Type), int64(len(s.Data) + len(s.StringData)), age(s.ObjectMeta, now)}, nil
		},
	},
	"Namespace": {
		columns: []metav1.TableColumnDefinition{col("Status", "string", 0, "phase"), col("Age", "string", 0, "age")},
		cells: func(raw []byte, now time.Time) ([]any, error) {
			var n corev1.Namespace
			if err := json.Unmarshal(raw, &n); err != nil {
				return nil, err
			}
			return []any{string(n.Status.Phase), age(n.ObjectMeta, now)}, nil
		},
	},
	"Node": {
		columns: []metav1.TableColumnDefinition{col("Status", "string", 0, "status"), col("Roles", "string", 0, "roles"), col("Age", "string", 0, "age"),
			col("Version", "string", 0, "kubelet version"), col("Internal-IP", "string", 1, "internal IP"), col("External-IP", "string", 1, "external IP"),
			col("OS-Image", "string", 1, "OS image"), col("Kernel-Version", "string", 1, "kernel"), col("Container-Runtime", "string", 1, "runtime")},
		cells: func(raw []byte, now time.Time) ([]any, error) {
			var n corev1.Node
			if err := json.Unmarshal(raw, &n); err != nil {
				return nil, err
			}
			st := "Unknown"
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					st = "NotReady"
					if c.Status == corev1.ConditionTrue {
						st = "Ready"
					}
				}
			}
			if n.Spec.Unschedulable {
				st += ",SchedulingDisabled"
			}
			var roles []string
			for k := range n.Labels {
				if r, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok && r != "" {
					roles = append(roles, r)
				}
			}
			sort.Strings(roles)
			in, ex := "<none>", "<none>"
			for _, a := range n.Status.Addresses {
				switch a.Type {
				case corev1.NodeInternalIP:
					in = a.Address
				case corev1.NodeExternalIP:
					ex = a.Address
				}
			}
			i := n.Status.NodeInfo
			return []any{st, orNone(strings.Join(roles, ",")), age(n.ObjectMeta, now), i.KubeletVersion, in, ex, orNone(i.OSImage),
				orNone(i.KernelVersion), orNone(i.ContainerRuntimeVersion)}, nil
		},
	},
}

var genericPrinter = printer{
	columns: []metav1.TableColumnDefinition{col("Age", "string", 0, "age")},
	cells: func(raw []byte, now time.Time) ([]any, error) {
		var o struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, err
		}
		return []any{age(o.Metadata, now)}, nil
	},
}

// podStatus is the STATUS column kubectl prints for a Pod (the common
// cases of its printPod).
func podStatus(p *corev1.Pod) string {
	reason := string(p.Status.Phase)
	if p.Status.Reason != "" {
		reason = p.Status.Reason
	}
	initializing := false
	for i, c := range p.Status.InitContainerStatuses {
		switch {
		case c.State.Terminated != nil && c.State.Terminated.ExitCode == 0:
			continue
		case c.State.Terminated != nil:
			reason = "Init:" + c.State.Terminated.Reason
			if c.State.Terminated.Reason == "" {
				reason = fmt.Sprintf("Init:ExitCode:%d", c.State.Terminated.ExitCode)
			}
		case c.State.Waiting != nil && c.State.Waiting.Reason != "" && c.State.Waiting.Reason != "PodInitializing":
			reason = "Init:" + c.State.Waiting.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(p.Spec.InitContainers))
		}
		initializing = true
		break
	}
	if !initializing {
		for i := len(p.Status.ContainerStatuses) - 1; i >= 0; i-- {
			c := p.Status.ContainerStatuses[i]
			if c.State.Waiting != nil && c.State.Waiting.Reason != "" {
				reason = c.State.Waiting.Reason
			} else if c.State.Terminated != nil && c.State.Terminated.Reason != "" {
				reason = c.State.Terminated.Reason
			}
		}
	}
	if p.DeletionTimestamp != nil {
		reason = "Terminating"
	}
	return reason
}

// table builds a meta.k8s.io/v1 Table for one resource.
type table struct {
	metav1.Table
	p   printer
	now time.Time
}

func newTable(c cached, lm metav1.ListMeta) (*table, error) {
	p, ok := printers[c.kind]
	if !ok {
		p = genericPrinter
	}
	t := &table{p: p, now: time.Now()}
	t.TypeMeta = metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"}
	t.ListMeta = lm
	t.ColumnDefinitions = append([]metav1.TableColumnDefinition{
		col("Cluster", "string", 0, "the member cluster the object is cached from"),
		col("Name", "string", 0, "name"),
	}, p.columns...)
	t.Rows = []metav1.TableRow{}
	return t, nil
}

// addRow appends the row of one object (its JSON).
func (t *table) addRow(raw []byte, include metav1.IncludeObjectPolicy) error {
	var o struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return fmt.Errorf("decode cached object: %w", err)
	}
	cells, err := t.p.cells(raw, t.now)
	if err != nil {
		return fmt.Errorf("decode cached object: %w", err)
	}
	row := metav1.TableRow{Cells: append([]any{o.Metadata.Annotations[clusterAnnotation], o.Metadata.Name}, cells...)}
	switch include {
	case metav1.IncludeObject:
		row.Object = runtime.RawExtension{Raw: raw}
	case metav1.IncludeMetadata:
		b, err := json.Marshal(metav1.PartialObjectMetadata{
			TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}, ObjectMeta: o.Metadata,
		})
		if err != nil {
			return err
		}
		row.Object = runtime.RawExtension{Raw: b}
	}
	t.Rows = append(t.Rows, row)
	return nil
}
