package relations

import (
	"encoding/json"
	"fmt"
)

// object holds the only fields Extract reads.
type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name            string `json:"name"`
		OwnerReferences []struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Name       string `json:"name"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Spec objSpec `json:"spec"`
}

// objSpec is the union of the spec fields of the kinds Extract reads; each
// kind fills only its own.
type objSpec struct {
	// Service's spec.selector is a map; the workloads' is a LabelSelector.
	// Both are decoded lazily from raw (selectorRaw).
	RawSelector     rawSelector       `json:"selector"`
	ServiceSelector map[string]string `json:"-"`
	Selector        *labelSelector    `json:"-"`
	PodSelector     *labelSelector    `json:"podSelector"`
	// Pod.
	NodeName           string      `json:"nodeName"`
	ServiceAccountName string      `json:"serviceAccountName"`
	Volumes            []volume    `json:"volumes"`
	Containers         []container `json:"containers"`
	InitContainers     []container `json:"initContainers"`
	EphemeralContainer []container `json:"ephemeralContainers"`
	ImagePullSecrets   []nameRef   `json:"imagePullSecrets"`
	// PersistentVolumeClaim.
	VolumeName string `json:"volumeName"`
	// Ingress.
	DefaultBackend *ingressBackend `json:"defaultBackend"`
	Rules          []struct {
		HTTP *struct {
			Paths []struct {
				Backend ingressBackend `json:"backend"`
			} `json:"paths"`
		} `json:"http"`
	} `json:"rules"`
	// HorizontalPodAutoscaler.
	ScaleTargetRef *struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Name       string `json:"name"`
	} `json:"scaleTargetRef"`
}

// rawSelector decodes spec.selector as either shape: a map of strings (a
// Service) or a LabelSelector (everything else).
type rawSelector struct {
	asMap map[string]string
	asSel *labelSelector
}

func (r *rawSelector) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var ls labelSelector
	if err := json.Unmarshal(b, &ls); err == nil && (ls.MatchLabels != nil || ls.MatchExpressions != nil || string(b) == "{}") {
		r.asSel = &ls
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err == nil {
		r.asMap = m
	}
	return nil
}

type labelSelector struct {
	MatchLabels      map[string]string `json:"matchLabels"`
	MatchExpressions []Requirement     `json:"matchExpressions"`
}

func (l *labelSelector) selector(ns string) (*Selector, error) {
	if l == nil {
		return nil, nil
	}
	for _, r := range l.MatchExpressions {
		switch r.Operator {
		case "In", "NotIn":
			if len(r.Values) == 0 {
				return nil, fmt.Errorf("matchExpressions key %q: operator %s needs values", r.Key, r.Operator)
			}
		case "Exists", "DoesNotExist":
		default:
			return nil, fmt.Errorf("matchExpressions key %q: unknown operator %q", r.Key, r.Operator)
		}
	}
	return &Selector{Kind: "Pod", Namespace: ns, MatchLabels: l.MatchLabels, MatchExpr: l.MatchExpressions}, nil
}

type nameRef struct {
	Name string `json:"name"`
}

type volume struct {
	ConfigMap *struct {
		Name string `json:"name"`
	} `json:"configMap"`
	Secret *struct {
		SecretName string `json:"secretName"`
	} `json:"secret"`
	PersistentVolumeClaim *struct {
		ClaimName string `json:"claimName"`
	} `json:"persistentVolumeClaim"`
	Projected *struct {
		Sources []struct {
			ConfigMap *nameRef `json:"configMap"`
			Secret    *nameRef `json:"secret"`
		} `json:"sources"`
	} `json:"projected"`
}

type container struct {
	EnvFrom []struct {
		ConfigMapRef *nameRef `json:"configMapRef"`
		SecretRef    *nameRef `json:"secretRef"`
	} `json:"envFrom"`
	Env []struct {
		ValueFrom *struct {
			ConfigMapKeyRef *nameRef `json:"configMapKeyRef"`
			SecretKeyRef    *nameRef `json:"secretKeyRef"`
		} `json:"valueFrom"`
	} `json:"env"`
}

type ingressBackend struct {
	Service *struct {
		Name string `json:"name"`
	} `json:"service"`
}

// pod adds a Pod's references.
func (s *objSpec) pod(ns string, add func(t EdgeType, group, kind, ns, name string)) {
	add(References, "", "Node", "", s.NodeName)
	add(References, "", "ServiceAccount", ns, s.ServiceAccountName)
	for _, v := range s.Volumes {
		if v.ConfigMap != nil {
			add(References, "", "ConfigMap", ns, v.ConfigMap.Name)
		}
		if v.Secret != nil {
			add(References, "", "Secret", ns, v.Secret.SecretName)
		}
		if v.PersistentVolumeClaim != nil {
			add(References, "", "PersistentVolumeClaim", ns, v.PersistentVolumeClaim.ClaimName)
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil {
					add(References, "", "ConfigMap", ns, src.ConfigMap.Name)
				}
				if src.Secret != nil {
					add(References, "", "Secret", ns, src.Secret.Name)
				}
			}
		}
	}
	for _, cs := range [][]container{s.InitContainers, s.Containers, s.EphemeralContainer} {
		for _, c := range cs {
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef != nil {
					add(References, "", "ConfigMap", ns, ef.ConfigMapRef.Name)
				}
				if ef.SecretRef != nil {
					add(References, "", "Secret", ns, ef.SecretRef.Name)
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom == nil {
					continue
				}
				if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
					add(References, "", "ConfigMap", ns, r.Name)
				}
				if r := e.ValueFrom.SecretKeyRef; r != nil {
					add(References, "", "Secret", ns, r.Name)
				}
			}
		}
	}
	for _, p := range s.ImagePullSecrets {
		add(References, "", "Secret", ns, p.Name)
	}
}
