package kubepath

import "testing"

func TestGroupName(t *testing.T) {
	for _, tc := range []struct{ group, name string }{
		{"", "core"},
		{"apps", "apps"},
		{"networking.k8s.io", "networking.k8s.io"},
	} {
		if got := GroupName(tc.group); got != tc.name {
			t.Errorf("GroupName(%q) = %q, want %q", tc.group, got, tc.name)
		}
		if got := GroupFromName(tc.name); got != tc.group {
			t.Errorf("GroupFromName(%q) = %q, want %q", tc.name, got, tc.group)
		}
	}
	if got := GroupFromName(""); got != "" {
		t.Errorf("GroupFromName(\"\") = %q, want the core group", got)
	}
}
