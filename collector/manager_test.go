package collector

import "testing"

func TestLastManager(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want fieldManager
		bad  bool
	}{
		{"none", `[]`, fieldManager{}, false},
		{"null", `null`, fieldManager{}, false},
		{"one", `[{"manager":"kubectl-client-side-apply","operation":"Update","apiVersion":"v1","time":"2026-12-06T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{}}}]`,
			fieldManager{"kubectl-client-side-apply", "Update", ""}, false},
		{"latest time wins", `[{"manager":"kubectl","operation":"Apply","time":"2026-12-06T10:00:05Z"},{"manager":"kube-controller-manager","operation":"Update","time":"2026-12-06T10:00:01Z"},{"manager":"kubelet","operation":"Update","subresource":"status","time":"2026-12-06T10:00:03Z"}]`,
			fieldManager{"kubectl", "Apply", ""}, false},
		{"status subresource", `[{"manager":"kubectl","operation":"Apply","time":"2026-12-06T10:00:01Z"},{"manager":"kubelet","operation":"Update","subresource":"status","time":"2026-12-06T10:00:09Z"}]`,
			fieldManager{"kubelet", "Update", "status"}, false},
		{"tie: Update beats Apply", `[{"manager":"kubectl","operation":"Apply","time":"2026-12-06T10:00:01Z"},{"manager":"deployment-controller","operation":"Update","subresource":"status","time":"2026-12-06T10:00:01Z"}]`,
			fieldManager{"deployment-controller", "Update", "status"}, false},
		{"tie: Update beats a later Apply", `[{"manager":"ctl","operation":"Update","time":"2026-12-06T10:00:01Z"},{"manager":"kubectl","operation":"Apply","time":"2026-12-06T10:00:01Z"}]`,
			fieldManager{"ctl", "Update", ""}, false},
		{"tie between Updates: the later entry", `[{"manager":"a","operation":"Update","time":"2026-12-06T10:00:01Z"},{"manager":"b","operation":"Update","time":"2026-12-06T10:00:01Z"}]`,
			fieldManager{"b", "Update", ""}, false},
		{"an entry without time loses", `[{"manager":"timed","operation":"Update","time":"2026-12-06T10:00:01Z"},{"manager":"untimed","operation":"Update"}]`,
			fieldManager{"timed", "Update", ""}, false},
		{"escaped manager", `[{"manager":"a\u0062c","operation":"Update","time":"2026-12-06T10:00:01Z"}]`,
			fieldManager{"abc", "Update", ""}, false},
		{"not an array", `{"manager":"x"}`, fieldManager{}, true},
		{"not a string", `[{"manager":5}]`, fieldManager{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := lastManager([]byte(tc.in))
			if (err != nil) != tc.bad {
				t.Fatalf("lastManager(%s) error %v, want error %v", tc.in, err, tc.bad)
			}
			if got != tc.want {
				t.Errorf("lastManager(%s) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestPruneObjectManager(t *testing.T) {
	in := `{"metadata":{"name":"p","uid":"u","managedFields":[{"manager":"kubectl","operation":"Apply","time":"2026-12-06T10:00:01Z"},{"manager":"kubelet","operation":"Update","subresource":"status","time":"2026-12-06T10:00:02Z"}]},"spec":{}}`
	cases := []struct {
		name string
		in   string
		want fieldManager
	}{
		{"from managedFields", in, fieldManager{"kubelet", "Update", "status"}},
		{"without managedFields", `{"metadata":{"name":"p","uid":"u"}}`, fieldManager{}},
		{"unreadable managedFields leave it empty", `{"metadata":{"name":"p","uid":"u","managedFields":{"x":1}}}`, fieldManager{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, fm, err := pruneObject([]byte(tc.in), "m1", secretsGVR, false)
			if err != nil {
				t.Fatal(err)
			}
			if fm != tc.want {
				t.Errorf("manager %+v, want %+v", fm, tc.want)
			}
			if m := decodeMap(t, out)["metadata"].(map[string]any); m["managedFields"] != nil {
				t.Errorf("managedFields kept: %s", out)
			}
		})
	}
}
