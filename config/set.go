package config

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

var (
	durationType  = reflect.TypeOf(time.Duration(0))
	textUnmarshal = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()
)

// field is one TOML-visible struct field.
type field struct {
	name  string // the TOML key: the tag name, else the Go name
	index []int  // path through embedded structs
	typ   reflect.Type
}

// fields lists t's TOML-visible fields the way the TOML decoder maps them:
// exported, `toml:"-"` skipped, untagged embedded structs flattened.
func fields(t reflect.Type) []field {
	var out []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && tag == "" && ft.Kind() == reflect.Struct {
			for _, sub := range fields(ft) {
				sub.index = append([]int{i}, sub.index...)
				out = append(out, sub)
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		name := tag
		if name == "" {
			name = f.Name
		}
		out = append(out, field{name: name, index: []int{i}, typ: f.Type})
	}
	return out
}

// lookup finds key among t's fields: exact match first, then
// case-insensitive, as the TOML decoder does.
func lookup(t reflect.Type, key string) (field, bool) {
	fs := fields(t)
	for _, f := range fs {
		if f.name == key {
			return f, true
		}
	}
	for _, f := range fs {
		if strings.EqualFold(f.name, key) {
			return f, true
		}
	}
	return field{}, false
}

// isLeaf reports whether a value of type t is set as a whole from one string.
func isLeaf(t reflect.Type) bool {
	return t == durationType || reflect.PointerTo(t).Implements(textUnmarshal) || t.Implements(textUnmarshal)
}

// apply parses one "section.key=value" override and sets the field it names.
func apply(root reflect.Value, s string) error {
	key, val, ok := strings.Cut(s, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return fmt.Errorf("--set %s: want section.key=value", s)
	}
	path := strings.Split(key, ".")
	v := root
	for i, p := range path {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		if v.Kind() == reflect.Map {
			if i == len(path)-1 && v.Type().Elem().Kind() == reflect.String {
				val = tomlQuote(val) // a map of strings takes the value as a string
			}
			return setTOML(root, s, path, val)
		}
		if v.Kind() != reflect.Struct || isLeaf(v.Type()) {
			return fmt.Errorf("--set %s: unknown key %q", s, key)
		}
		f, found := lookup(v.Type(), p)
		if !found {
			return fmt.Errorf("--set %s: unknown key %q", s, key)
		}
		v = fieldByIndex(v, f.index)
		if i == len(path)-1 {
			return setLeaf(root, v, s, path, key, val)
		}
	}
	return nil
}

// fieldByIndex walks embedded structs, allocating nil embedded pointers.
func fieldByIndex(v reflect.Value, index []int) reflect.Value {
	for i, x := range index {
		if i > 0 {
			for v.Kind() == reflect.Pointer {
				if v.IsNil() {
					v.Set(reflect.New(v.Type().Elem()))
				}
				v = v.Elem()
			}
		}
		v = v.Field(x)
	}
	return v
}

// setLeaf parses val by the type of v and stores it.
func setLeaf(root, v reflect.Value, s string, path []string, key, val string) error {
	for v.Kind() == reflect.Pointer && !v.Type().Implements(textUnmarshal) {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		v = v.Elem()
	}
	want := func(what string) error { return fmt.Errorf("--set %s: %s wants %s", s, key, what) }
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(val)
		if err != nil {
			return want("a duration such as 30s or 1h30m")
		}
		v.SetInt(int64(d))
		return nil
	case v.CanAddr() && v.Addr().Type().Implements(textUnmarshal):
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(val)); err != nil {
			return fmt.Errorf("--set %s: %s: %w", s, key, err)
		}
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(val)
	case reflect.Bool:
		b, err := strconv.ParseBool(val)
		if err != nil {
			return want("true or false")
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(strings.ReplaceAll(val, "_", ""), 10, v.Type().Bits())
		if err != nil {
			return want(fmt.Sprintf("an integer (%d-bit)", v.Type().Bits()))
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(strings.ReplaceAll(val, "_", ""), 10, v.Type().Bits())
		if err != nil {
			return want("a non-negative integer")
		}
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(val, v.Type().Bits())
		if err != nil {
			return want("a number")
		}
		v.SetFloat(f)
	case reflect.Struct, reflect.Map:
		return fmt.Errorf("--set %s: %s is a section; set one of its keys (%s.<key>=value)", s, key, key)
	default: // arrays, slices, maps: the value is a TOML literal
		return setTOML(root, s, path, val)
	}
	return nil
}

// setTOML decodes `path = val` as a one-line TOML document into root, for
// values that are not scalars (arrays, inline tables, map entries).
func setTOML(root reflect.Value, s string, path []string, val string) error {
	q := make([]string, len(path))
	for i, p := range path {
		q[i] = tomlQuote(p)
	}
	doc := strings.Join(q, ".") + " = " + val + "\n"
	md, err := decode([]byte(doc), root.Addr().Interface())
	if err != nil {
		var pe toml.ParseError
		msg := err.Error()
		if errors.As(err, &pe) {
			msg = pe.Message
		} else if m := decodeErrRE.FindStringSubmatch(msg); m != nil {
			msg = m[3]
		}
		return fmt.Errorf("--set %s: %s: %s", s, strings.Join(path, "."), strings.TrimPrefix(msg, "toml: "))
	}
	if unknown := topUnknown(md.Undecoded()); len(unknown) > 0 {
		return fmt.Errorf("--set %s: %s", s, unknownMsg(unknown))
	}
	return nil
}

// tomlQuote writes s as a TOML basic string.
func tomlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
