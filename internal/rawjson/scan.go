package rawjson

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// maxDepth is encoding/json's nesting limit (and so the apiserver's): a
// document the standard decoder refuses is refused here too, and a hostile
// one cannot make the bracket stack grow without bound.
const maxDepth = 10000

// SkipSpace returns the offset of the first byte at or after i that is not
// JSON white space.
func SkipSpace(b []byte, i int) int {
	// The apiserver writes no white space: one comparison settles the
	// common case.
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset just past the string starting at
// b[i] == '"'. Most of an object's bytes are inside strings, so it jumps
// from quote to quote (bytes.IndexByte is vectorised) and counts the
// backslashes before each: a quote after an odd number of them is escaped.
func skipString(b []byte, i int) (int, error) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, syntax("unterminated string", i)
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, nil
		}
		j = q + 1
	}
}

func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit), nil
	}
	return 0, syntax("invalid literal", i)
}

// skipNumber follows the JSON number grammar:
// -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
func skipNumber(b []byte, i int) (int, error) {
	start := i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	case i == start:
		return 0, syntax(fmt.Sprintf("value expected, got %q", b[i]), i)
	default:
		return 0, syntax("invalid number", start)
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return 0, syntax("invalid number", start)
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return 0, syntax("invalid number", start)
		}
		i = j
	}
	return i, nil
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// stack holds which open containers are objects. Kubernetes objects nest
// a dozen levels at most, so a word of bits holds them without allocating.
type stack struct {
	depth int
	bits  uint64
	more  []bool // levels past 64
}

func (s *stack) push(obj bool) {
	if s.depth < 64 {
		if obj {
			s.bits |= 1 << s.depth
		} else {
			s.bits &^= 1 << s.depth
		}
	} else {
		s.more = append(s.more, obj)
	}
	s.depth++
}

func (s *stack) pop() {
	s.depth--
	if s.depth >= 64 {
		s.more = s.more[:len(s.more)-1]
	}
}

// inObject reports whether the innermost open container is an object.
func (s *stack) inObject() bool {
	if s.depth > 64 {
		return s.more[len(s.more)-1]
	}
	return s.bits&(1<<(s.depth-1)) != 0
}

// SkipValue returns the offset just past the JSON value at or after b[i]
// (leading white space is skipped). A literal or number must follow the
// JSON grammar. Inside an object or array it checks only that brackets
// match and strings end, not what lies between (commas, colons, literals,
// numbers): that is a bracket count with a stack, almost as cheap as the
// count alone, while checking the full grammar there cost 5% of Labels on
// a Pod. Members reads the members of the objects a caller looks into.
func SkipValue(b []byte, i int) (int, error) {
	i = SkipSpace(b, i)
	if i >= len(b) {
		return 0, syntax("value expected", i)
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		return skipNested(b, i)
	case 't':
		return literal(b, i, "true")
	case 'f':
		return literal(b, i, "false")
	case 'n':
		return literal(b, i, "null")
	}
	return skipNumber(b, i)
}

// skipNested returns the offset just past the object or array at b[i].
func skipNested(b []byte, i int) (int, error) {
	var st stack
	for j := i; j < len(b); j++ {
		switch c := b[j]; c {
		case '"':
			end, err := skipString(b, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case '{', '[':
			// The object this value is a member of is a level too.
			if st.depth >= maxDepth-1 {
				return 0, syntax("nested too deeply", j)
			}
			st.push(c == '{')
		case '}', ']':
			if st.inObject() != (c == '}') {
				return 0, syntax(fmt.Sprintf("mismatched %q", c), j)
			}
			st.pop()
			if st.depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, syntax("unterminated object or array", i)
}

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
	dst, end, err := Members(obj, 0, dst)
	if err != nil {
		return nil, err
	}
	return dst, checkEnd(obj, end)
}

// Check reports whether obj is one object with nothing after it, as far
// as this package checks JSON (see the package comment): what Labels and
// ObjectMembers check, without reading anything.
func Check(obj []byte) error {
	end, err := EachMember(obj, 0, func(m Member) (int, error) {
		return SkipValue(obj, m.ValueStart)
	})
	if err != nil {
		return err
	}
	return checkEnd(obj, end)
}

func checkEnd(obj []byte, end int) error {
	if i := SkipSpace(obj, end); i != len(obj) {
		return syntax("trailing data after the object", i)
	}
	return nil
}

// String decodes a JSON string value, or null as "". Values without
// escapes are taken verbatim; the few with escapes go through
// encoding/json, which also checks them.
func String(v []byte) (string, error) {
	if len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), nil
	}
	if string(v) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", &SyntaxError{Msg: err.Error(), Offset: -1}
	}
	return s, nil
}
