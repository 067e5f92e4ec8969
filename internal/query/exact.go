package query

// ExactForbidden says why a list may not ask for resourceVersionMatch=Exact
// with resource version rv and continue token cont, in the words of
// Kubernetes' list-options validation; "" when it may. The query services
// and the Kubernetes API both check it.
func ExactForbidden(rv, cont string) string {
	switch {
	case rv == "":
		return "resourceVersionMatch is forbidden unless resourceVersion is provided"
	case rv == "0":
		return `resourceVersionMatch "exact" is forbidden for resourceVersion "0"`
	case cont != "":
		return "resourceVersionMatch is forbidden when continue is provided"
	}
	return ""
}
