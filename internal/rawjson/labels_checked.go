package rawjson

import (
	"errors"
	"fmt"
)

// CheckedLabels is metadata.labels of an object already checked whole
// (a backend's own stored or rebuilt JSON, one metadata member), read
// only through its metadata member: Labels checks the rest of the object
// too, most of a Pod's bytes, which a caller reading many such objects
// (an as-of list's rebuilt states) pays for nothing. The labels are
// checked as Labels checks them; the members before metadata are
// skipped by the same scanner; nothing after it is read.
func CheckedLabels(obj []byte) (map[string]string, error) {
	if err := checkSize(obj); err != nil {
		return nil, err
	}
	var labels map[string]string
	_, err := EachMember(obj, 0, func(m Member) (int, error) {
		if ok, err := keyIs(m, "metadata"); err != nil || !ok {
			if err != nil {
				return 0, err
			}
			return SkipValue(obj, m.ValueStart)
		}
		if _, err := EachMember(obj, m.ValueStart, func(m Member) (int, error) {
			if ok, err := keyIs(m, "labels"); err != nil || !ok {
				if err != nil {
					return 0, err
				}
				return skipValue(obj, m.ValueStart, 2)
			}
			if i := m.ValueStart; i < len(obj) && obj[i] == 'n' {
				labels = nil
				return literal(obj, i, "null")
			}
			l, e, err := stringMap(obj, m.ValueStart, nil)
			if err != nil {
				return 0, fmt.Errorf("metadata.labels: %w", err)
			}
			labels = l
			return e, nil
		}); err != nil {
			return 0, err
		}
		return 0, errMetadataRead
	})
	if err != nil && !errors.Is(err, errMetadataRead) {
		return nil, err
	}
	return labels, nil
}
