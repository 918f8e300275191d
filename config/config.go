// Package config loads TOML job files into a caller's struct.
//
// A job file has one table per component ([model], [train], [data],
// [checkpoint], ...); the caller's struct has one field per table, tagged
// `toml:"model"` and so on, each holding that component's own Config type.
// Command-line overrides of the form section.key=value apply after the file.
// Every key must land on a field: unknown keys and values of the wrong type
// are errors that name the key and where it came from.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// Load fills dst, a pointer to a struct already holding the defaults: first
// from the TOML file at path (skipped when path is ""), then from sets, each
// "section.key=value" with the value parsed by the destination field's type.
func Load(dst any, path string, sets []string) error {
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("config: Load wants a non-nil pointer to a struct, got %T", dst)
	}
	if path != "" {
		if err := loadFile(dst, path); err != nil {
			return err
		}
	}
	for _, s := range sets {
		if err := apply(rv.Elem(), s); err != nil {
			return err
		}
	}
	return nil
}

// Decode is Load for a job file already in memory: text is decoded as the
// file name would be (name labels the errors), then sets apply.
func Decode(dst any, name string, text []byte, sets []string) error {
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("config: Decode wants a non-nil pointer to a struct, got %T", dst)
	}
	if err := decodeText(dst, name, text); err != nil {
		return err
	}
	for _, s := range sets {
		if err := apply(rv.Elem(), s); err != nil {
			return err
		}
	}
	return nil
}

// loadFile decodes the file at path into dst and rejects unknown keys.
func loadFile(dst any, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err // *fs.PathError names the file
	}
	defer f.Close()
	// Bounded: --config /dev/zero must not read forever.
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return err
	}
	if len(b) > MaxFileBytes {
		return fmt.Errorf("%s: a job file may have at most %d bytes (1 MiB)", path, MaxFileBytes)
	}
	return decodeText(dst, path, b)
}

// MaxFileBytes bounds a job file; real ones are a few hundred bytes.
const MaxFileBytes = 1 << 20

// decodeText decodes job text b (labelled path) into dst and rejects
// unknown keys.
func decodeText(dst any, path string, b []byte) error {
	md, err := decode(b, dst)
	if err != nil {
		return fileError(path, b, err)
	}
	if unknown := topUnknown(md.Undecoded()); len(unknown) > 0 {
		return fmt.Errorf("%s: %s", path, unknownMsg(unknown))
	}
	return checkTables(md, reflect.TypeOf(dst), path)
}

// checkTables rejects a plain value given for a section (a struct or map
// field), which the TOML decoder lets through silently for maps.
func checkTables(md toml.MetaData, root reflect.Type, path string) error {
	for _, k := range md.Keys() {
		if t, ok := destType(root, k); ok && !isLeaf(t) && (t.Kind() == reflect.Struct || t.Kind() == reflect.Map) {
			if typ := md.Type(k...); typ != "Hash" {
				return fmt.Errorf("%s: %s is a section, not a value (%s given)", path, k, strings.ToLower(typ))
			}
		}
	}
	return nil
}

// destType follows key through structs and maps to the Go type it fills.
func destType(t reflect.Type, key toml.Key) (reflect.Type, bool) {
	for _, p := range key {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t.Kind() == reflect.Map:
			t = t.Elem()
		case t.Kind() == reflect.Struct && !isLeaf(t):
			f, ok := lookup(t, p)
			if !ok {
				return nil, false
			}
			t = f.typ
		default:
			return nil, false
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t, true
}

// decode runs the TOML decoder, turning a panic inside it (malformed input
// reaching a decoder bug) into an error: a job file is outside input.
func decode(b []byte, dst any) (md toml.MetaData, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("toml: decoder failed: %v", r)
		}
	}()
	return toml.NewDecoder(bytes.NewReader(b)).Decode(dst)
}

// fileError formats a decode error as "path:line: message" where it can.
// The line is that of the offending byte (the decoder's own line number
// is one past it when the offending byte is a line's newline), and an
// error inside a table header names the header, not the previous key.
func fileError(path string, b []byte, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) && pe.Position.Line > 0 {
		line := pe.Position.Line
		if st := pe.Position.Start; st >= 0 && st <= len(b) {
			line = 1 + bytes.Count(b[:st], []byte("\n"))
		}
		msg := pe.Message
		if text := lineText(b, line); strings.HasPrefix(text, "[") {
			msg = fmt.Sprintf("%s (table header %q)", msg, text)
		} else if pe.LastKey != "" {
			msg = fmt.Sprintf("%s (key %q)", msg, pe.LastKey)
		}
		return fmt.Errorf("%s:%d: %s", path, line, msg)
	}
	if m := decodeErrRE.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("%s:%s: %s: %s", path, m[1], m[2], m[3])
	}
	return fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "toml: "))
}

// lineText is line n (1-based) of b, trimmed.
func lineText(b []byte, n int) string {
	lines := bytes.Split(b, []byte("\n"))
	if n < 1 || n > len(lines) {
		return ""
	}
	return strings.TrimSpace(string(lines[n-1]))
}

// decodeErrRE matches the decoder's type errors,
// `toml: line 2 (last key "train.steps"): incompatible types: ...`.
var decodeErrRE = regexp.MustCompile(`^toml: line (\d+) \(last key "(.*?)"\): (.*)$`)

// topUnknown keeps the outermost of the undecoded keys: an unknown table is
// reported once, not once per key inside it.
func topUnknown(keys []toml.Key) []string {
	seen := map[string]bool{}
	var out []string
	for _, k := range keys {
		seen[k.String()] = true
	}
	for _, k := range keys {
		inner := false
		for i := 1; i < len(k); i++ {
			if seen[k[:i].String()] {
				inner = true
				break
			}
		}
		if !inner {
			out = append(out, k.String())
		}
	}
	return out
}

// unknownMsg reads `unknown key "a.b"` or `unknown keys "a.b", "c"`.
func unknownMsg(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = fmt.Sprintf("%q", k)
	}
	if len(q) == 1 {
		return "unknown key " + q[0]
	}
	return "unknown keys " + strings.Join(q, ", ")
}

// Dump returns the effective configuration as TOML, for logs and
// checkpoints. It cannot fail for a struct Load accepts; anything else
// yields a TOML comment naming the problem.
func Dump(dst any) string {
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(dst); err != nil {
		return fmt.Sprintf("# config: cannot encode %T: %v\n", dst, err)
	}
	return b.String()
}

// Keys lists every settable key of dst ("section.key"), sorted: the
// vocabulary of --set, for help text and error hints.
func Keys(dst any) []string {
	var out []string
	collectKeys(reflect.TypeOf(dst), "", &out, 0)
	sort.Strings(out)
	return out
}

func collectKeys(t reflect.Type, prefix string, out *[]string, depth int) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || depth > 8 {
		return
	}
	if t.Kind() != reflect.Struct || isLeaf(t) {
		if prefix != "" {
			*out = append(*out, prefix)
		}
		return
	}
	for _, f := range fields(t) {
		name := f.name
		if prefix != "" {
			name = prefix + "." + name
		}
		collectKeys(f.typ, name, out, depth+1)
	}
}
