package rawjson

import "fmt"

// Member is one member of a JSON object, as offsets into the scanned input.
type Member struct {
	// Key is the raw key between its quotes, escapes not decoded: the
	// members the callers look for are plain ASCII names.
	Key []byte
	// Start and End span `"key": value`.
	Start, End int
	// ValueStart and ValueEnd span the value alone.
	ValueStart, ValueEnd int
}

// EachMember reads the object at or after b[i] and returns the offset just
// past it. It calls f with each member, whose ValueEnd and End are not set
// yet: f reads the value in place (with SkipValue, or EachMember for an
// object it looks into, so that value is scanned once) and returns the
// offset just past it.
func EachMember(b []byte, i int, f func(m Member) (int, error)) (int, error) {
	i = SkipSpace(b, i)
	if i >= len(b) || b[i] != '{' {
		return 0, syntax("object expected", i)
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		m, err := memberName(b, i)
		if err != nil {
			return 0, err
		}
		if i, err = f(m); err != nil {
			return 0, err
		}
		var done bool
		if i, done, err = nextMember(b, i); err != nil || done {
			return i, err
		}
	}
}

// memberName reads `"key" :` at b[i] (no leading space) and returns the
// member with its Key, Start and ValueStart (after white space) set.
func memberName(b []byte, i int) (Member, error) {
	if i >= len(b) || b[i] != '"' {
		return Member{}, syntax("object key expected", i)
	}
	ke, err := skipString(b, i)
	if err != nil {
		return Member{}, err
	}
	m := Member{Key: b[i+1 : ke-1], Start: i}
	j := SkipSpace(b, ke)
	if j >= len(b) || b[j] != ':' {
		return Member{}, syntax("':' expected after an object key", j)
	}
	m.ValueStart = SkipSpace(b, j+1)
	return m, nil
}

// nextMember reads what follows a member's value at b[i]: a comma (it
// returns the offset of the next key) or the closing brace (it returns the
// offset just past the object, and done).
func nextMember(b []byte, i int) (int, bool, error) {
	i = SkipSpace(b, i)
	if i >= len(b) {
		return 0, false, syntax("unterminated object", i)
	}
	switch b[i] {
	case ',':
		return SkipSpace(b, i+1), false, nil
	case '}':
		return i + 1, true, nil
	}
	return 0, false, syntax(fmt.Sprintf("',' or '}' expected, got %q", b[i]), i)
}

// Members appends the members of the object at or after b[i] to dst and
// returns them and the offset just past the object.
func Members(b []byte, i int, dst []Member) ([]Member, int, error) {
	i = SkipSpace(b, i)
	if i >= len(b) || b[i] != '{' {
		return nil, 0, syntax("object expected", i)
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return dst, i + 1, nil
	}
	// The member loop is written out rather than built on memberName and
	// nextMember: the collector runs it twice per object, and the calls
	// were a measurable part of its cost.
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, 0, syntax("object key expected", i)
		}
		ke, err := skipString(b, i)
		if err != nil {
			return nil, 0, err
		}
		m := Member{Key: b[i+1 : ke-1], Start: i}
		if i = SkipSpace(b, ke); i >= len(b) || b[i] != ':' {
			return nil, 0, syntax("':' expected after an object key", i)
		}
		m.ValueStart = SkipSpace(b, i+1)
		if m.ValueEnd, err = SkipValue(b, m.ValueStart); err != nil {
			return nil, 0, err
		}
		m.End = m.ValueEnd
		dst = append(dst, m)
		if i = SkipSpace(b, m.ValueEnd); i >= len(b) {
			return nil, 0, syntax("unterminated object", i)
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case '}':
			return dst, i + 1, nil
		default:
			return nil, 0, syntax(fmt.Sprintf("',' or '}' expected, got %q", b[i]), i)
		}
	}
}

// ObjectMembers is Members of a whole document: obj must be one object
// with nothing but white space after it.
func ObjectMembers(obj []byte, dst []Member) ([]Member, error) {
	if err := checkSize(obj); err != nil {
		return nil, err
	}
	dst, end, err := Members(obj, 0, dst)
	if err != nil {
		return nil, err
	}
	return dst, checkEnd(obj, end)
}
