package rawjson

import (
	"errors"
	"fmt"
)

// RowSpans are where a Table row's parts lie in a Kubernetes object's
// JSON: the metadata member's value, and in it the values of name,
// creationTimestamp and the annotation a caller names (each a JSON string
// with its quotes; a zero Span: absent or null). Found once when the hub
// stores an object, a Table row is then a few copies instead of a walk
// over the metadata.
type RowSpans struct {
	Metadata, Name, Created, Annotation Span
}

// ErrNoMetadata: the object has no metadata object.
var ErrNoMetadata = errors.New("object without metadata")

// errMetadataRead ends FindRowSpans's walk once the metadata is read:
// kind and apiVersion come first and metadata next, so a row reads a few
// hundred bytes of a Pod, not its spec and status.
var errMetadataRead = errors.New("metadata read")

// FindRowSpans finds the RowSpans of obj, reading its metadata member's
// every byte once (a member's value is skipped, or walked for the
// annotation, not both) and stopping after it. obj need not have passed
// Check: what FindRowSpans reads it checks.
func FindRowSpans(obj []byte, annotation string) (RowSpans, error) {
	var r RowSpans
	found := false
	str := func(key string, s, e int) (Span, error) {
		if obj[s] == 'n' {
			return Span{}, nil // null
		}
		if obj[s] != '"' {
			return Span{}, fmt.Errorf("metadata.%s is %.20s, not a string", key, obj[s:e])
		}
		return Span{Start: s, End: e}, nil
	}
	_, err := EachMember(obj, 0, func(top Member) (int, error) {
		if string(top.Key) != "metadata" {
			return SkipValue(obj, top.ValueStart)
		}
		if obj[top.ValueStart] != '{' {
			return 0, ErrNoMetadata
		}
		found = true
		end, err := EachMember(obj, top.ValueStart, func(f Member) (int, error) {
			if string(f.Key) == "annotations" && obj[f.ValueStart] != 'n' {
				if obj[f.ValueStart] != '{' {
					return 0, errors.New("metadata.annotations is not an object")
				}
				return EachMember(obj, f.ValueStart, func(a Member) (int, error) {
					aend, err := SkipValue(obj, a.ValueStart)
					if err == nil && string(a.Key) == annotation {
						r.Annotation, err = str("annotations", a.ValueStart, aend)
					}
					return aend, err
				})
			}
			fend, err := SkipValue(obj, f.ValueStart)
			if err != nil {
				return 0, err
			}
			switch string(f.Key) {
			case "name":
				r.Name, err = str("name", f.ValueStart, fend)
			case "creationTimestamp":
				r.Created, err = str("creationTimestamp", f.ValueStart, fend)
			}
			return fend, err
		})
		if err == nil {
			r.Metadata = Span{Start: top.ValueStart, End: end}
			err = errMetadataRead
		}
		return end, err
	})
	switch {
	case errors.Is(err, errMetadataRead):
		err = nil
	case err == nil && !found:
		err = ErrNoMetadata
	}
	return r, err
}

// Valid reports whether r could be obj's RowSpans: every span inside obj,
// the metadata an object and the others strings inside it. Spans stored
// beside an object are checked with it before a row trusts them.
func (r RowSpans) Valid(obj []byte) bool {
	m := r.Metadata
	if m.Start < 0 || m.End > len(obj) || m.End-m.Start < 2 || obj[m.Start] != '{' || obj[m.End-1] != '}' {
		return false
	}
	for _, s := range []Span{r.Name, r.Created, r.Annotation} {
		if s == (Span{}) {
			continue
		}
		if s.Start <= m.Start || s.End >= m.End || s.End-s.Start < 2 || obj[s.Start] != '"' || obj[s.End-1] != '"' {
			return false
		}
	}
	return true
}

// Offsets appends r's eight offsets to dst: the start and end of
// Metadata, Name, Created and Annotation, in that order (the form a list
// answer carries them in, and the Badger record stores).
func (r RowSpans) Offsets(dst []uint32) []uint32 {
	for _, s := range [...]Span{r.Metadata, r.Name, r.Created, r.Annotation} {
		dst = append(dst, uint32(s.Start), uint32(s.End))
	}
	return dst
}

// RowSpansAt reads the eight offsets Offsets wrote.
func RowSpansAt(o []uint32) RowSpans {
	sp := func(i int) Span { return Span{Start: int(o[i]), End: int(o[i+1])} }
	return RowSpans{Metadata: sp(0), Name: sp(2), Created: sp(4), Annotation: sp(6)}
}
