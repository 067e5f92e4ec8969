package rawjson

// Span is where one value lies in a document: b[Start:End].
type Span struct{ Start, End int }

// Elements checks that b is one JSON array, valid by the whole grammar, at
// most MaxSize bytes, with nothing but white space after it, and appends
// the span of each element to dst. A Table row's cells come from a member
// cluster the hub does not trust; the answer writes them back as bytes, so
// they are checked here, once, by the same grammar as objects.
func Elements(b []byte, dst []Span) ([]Span, error) {
	if err := checkSize(b); err != nil {
		return nil, err
	}
	i := SkipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, syntax("array expected", i)
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return dst, checkEnd(b, i+1)
	}
	for {
		i = SkipSpace(b, i)
		end, err := skipValue(b, i, 1)
		if err != nil {
			return nil, err
		}
		dst = append(dst, Span{Start: i, End: end})
		i = SkipSpace(b, end)
		if i >= len(b) {
			return nil, syntax("unterminated array", i)
		}
		switch b[i] {
		case ',':
			i++
		case ']':
			return dst, checkEnd(b, i+1)
		default:
			return nil, syntax("',' or ']' expected after an element", i)
		}
	}
}
