package main

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// JSON types of a jsonShape. A shape the Go type leaves open (an empty
// interface, a json.RawMessage) is jsonAny.
const (
	jsonString  = "string"
	jsonNumber  = "number"
	jsonBoolean = "boolean"
	jsonObject  = "object"
	jsonArray   = "array"
	jsonAny     = "any"
)

// jsonShape is the shape of the JSON encoding/json writes for a Go value:
// its JSON type and, for objects and arrays, its members. It is derived
// from the value's type, so a field left out when empty (omitempty,
// omitzero) is still part of it.
type jsonShape struct {
	typ    string                // a JSON type above, or several joined by "|"
	fields map[string]*jsonShape // an object's members by name
	elem   *jsonShape            // an array's elements, or the values of a map under any key ("*")
}

var (
	rawMessageType    = reflect.TypeFor[json.RawMessage]()
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// shapeOf derives the shape of v's JSON encoding, following
// encoding/json's rules:
//
//   - a struct's members are its exported fields under their json tag
//     names (omitempty and omitzero ones included, "-" ones left out,
//     embedded structs' fields promoted), a ",string" option making a
//     number or boolean a string;
//   - a slice or array is an array of its element type ([]byte: a base64
//     string);
//   - a map whose values are interfaces (map[string]any), and a map at
//     the document's root, is an object with the keys v has: the command
//     built it with those keys. Any other map is an object whose keys are
//     data (kinds, states, metadata), written "*", of its value type;
//   - an interface is the shape of the value it holds (any when nil);
//   - json.RawMessage is any; a type with MarshalText (time.Time,
//     uuid.UUID) is a string; a struct with its own MarshalJSON (ax.Schedule)
//     is taken as its fields say, which TestCLISurface checks against the
//     document printed; another json.Marshaler is the type of what it
//     writes.
func shapeOf(v any) (*jsonShape, error) {
	d := &shapeDeriver{onStack: map[reflect.Type]bool{}}
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return &jsonShape{typ: jsonAny}, nil
	}
	s := d.shape(rv.Type(), rv, true)
	return s, d.err
}

// shapeDeriver walks a type, remembering the first error and the structs
// being walked (a recursive type ends as an object without members).
type shapeDeriver struct {
	onStack map[reflect.Type]bool
	err     error
}

// shape returns t's shape; v is a value of t when one is at hand (its
// interfaces' and maps' contents), else the zero Value. keysFromValue
// lists a map's keys from v instead of writing "*".
func (d *shapeDeriver) shape(t reflect.Type, v reflect.Value, keysFromValue bool) *jsonShape {
	if t == rawMessageType {
		return &jsonShape{typ: jsonAny}
	}
	if t.Kind() == reflect.Pointer {
		if v.IsValid() && !v.IsNil() {
			return d.shape(t.Elem(), v.Elem(), keysFromValue)
		}
		return d.shape(t.Elem(), reflect.Value{}, keysFromValue)
	}
	if t.Kind() == reflect.Interface {
		if v.IsValid() && !v.IsNil() {
			return d.shape(v.Elem().Type(), v.Elem(), true)
		}
		return &jsonShape{typ: jsonAny}
	}
	if implementsEither(t, textMarshalerType) {
		return &jsonShape{typ: jsonString}
	}
	if implementsEither(t, jsonMarshalerType) && t.Kind() != reflect.Struct {
		return d.marshaled(t, v)
	}
	switch t.Kind() {
	case reflect.Bool:
		return &jsonShape{typ: jsonBoolean}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return &jsonShape{typ: jsonNumber}
	case reflect.String:
		return &jsonShape{typ: jsonString}
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 && !implementsEither(t.Elem(), jsonMarshalerType) && !implementsEither(t.Elem(), textMarshalerType) {
			return &jsonShape{typ: jsonString} // base64
		}
		elem := d.shape(t.Elem(), reflect.Value{}, false)
		for i := range lenOf(v) {
			elem = mergeShapes(elem, d.shape(t.Elem(), v.Index(i), false))
		}
		return &jsonShape{typ: jsonArray, elem: elem}
	case reflect.Map:
		if keysFromValue || t.Elem().Kind() == reflect.Interface {
			s := &jsonShape{typ: jsonObject, fields: map[string]*jsonShape{}}
			if v.IsValid() {
				for it := v.MapRange(); it.Next(); {
					s.fields[d.mapKey(it.Key())] = d.shape(t.Elem(), it.Value(), false)
				}
			}
			return s
		}
		elem := d.shape(t.Elem(), reflect.Value{}, false)
		if v.IsValid() {
			for it := v.MapRange(); it.Next(); {
				elem = mergeShapes(elem, d.shape(t.Elem(), it.Value(), false))
			}
		}
		return &jsonShape{typ: jsonObject, elem: elem}
	case reflect.Struct:
		return d.structShape(t, v)
	}
	d.fail(fmt.Errorf("%s: encoding/json cannot encode a %s", t, t.Kind()))
	return &jsonShape{typ: jsonAny}
}

// structShape is a struct's object: its fields as encoding/json names them.
func (d *shapeDeriver) structShape(t reflect.Type, v reflect.Value) *jsonShape {
	s := &jsonShape{typ: jsonObject, fields: map[string]*jsonShape{}}
	if d.onStack[t] {
		return s
	}
	d.onStack[t] = true
	defer delete(d.onStack, t)
	for _, f := range jsonFields(t) {
		var fv reflect.Value
		if v.IsValid() {
			fv, _ = v.FieldByIndexErr(f.index) // an error: a nil embedded pointer, no value
		}
		fs := d.shape(f.typ, fv, false)
		if f.quoted && (fs.typ == jsonNumber || fs.typ == jsonBoolean) {
			fs = &jsonShape{typ: jsonString}
		}
		s.fields[f.name] = fs
	}
	return s
}

// marshaled is the shape of a non-struct json.Marshaler: the JSON type of
// what it writes for v (or its zero value).
func (d *shapeDeriver) marshaled(t reflect.Type, v reflect.Value) *jsonShape {
	if !v.IsValid() {
		v = reflect.Zero(t)
	}
	data, err := json.Marshal(v.Interface())
	if err != nil {
		d.fail(fmt.Errorf("%s: marshal: %w", t, err))
		return &jsonShape{typ: jsonAny}
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		d.fail(fmt.Errorf("%s: its MarshalJSON wrote invalid JSON: %w", t, err))
		return &jsonShape{typ: jsonAny}
	}
	if doc == nil {
		return &jsonShape{typ: jsonAny}
	}
	return &jsonShape{typ: jsonTypeOf(doc)}
}

// mapKey is a map key as encoding/json writes it.
func (d *shapeDeriver) mapKey(k reflect.Value) string {
	switch {
	case k.Kind() == reflect.String:
		return k.String()
	case implementsEither(k.Type(), textMarshalerType):
		b, err := k.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			d.fail(fmt.Errorf("map key %v: %w", k, err))
		}
		return string(b)
	case k.CanInt():
		return strconv.FormatInt(k.Int(), 10)
	case k.CanUint():
		return strconv.FormatUint(k.Uint(), 10)
	}
	d.fail(fmt.Errorf("map key of type %s: encoding/json cannot encode it", k.Type()))
	return "?"
}

func (d *shapeDeriver) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

// implementsEither reports whether t or *t implements iface, as encoding/json
// finds the methods of addressable values.
func implementsEither(t, iface reflect.Type) bool {
	return t.Implements(iface) || reflect.PointerTo(t).Implements(iface)
}

// lenOf is the length of a slice or array value, 0 for none.
func lenOf(v reflect.Value) int {
	if !v.IsValid() {
		return 0
	}
	return v.Len()
}

// jsonField is a struct field as encoding/json encodes it.
type jsonField struct {
	name   string
	index  []int
	typ    reflect.Type
	quoted bool // the ",string" option
	tagged bool // the name comes from a json tag
	depth  int  // how deep in embedded structs
}

// jsonFields lists t's encoded fields: exported, not tagged "-", embedded
// structs without a tag name promoted, and of several fields with one name
// the shallowest (then the only tagged one) kept, none when that leaves a
// tie, as encoding/json does.
func jsonFields(t reflect.Type) []jsonField {
	var all []jsonField
	var walk func(t reflect.Type, index []int, depth int, seen map[reflect.Type]bool)
	walk = func(t reflect.Type, index []int, depth int, seen map[reflect.Type]bool) {
		if seen[t] {
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for i := range t.NumField() {
			f := t.Field(i)
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if f.Anonymous {
				if !f.IsExported() && ft.Kind() != reflect.Struct {
					continue
				}
			} else if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			idx := append(slices.Clone(index), i)
			if name == "" && f.Anonymous && ft.Kind() == reflect.Struct {
				walk(ft, idx, depth+1, seen)
				continue
			}
			jf := jsonField{name: name, index: idx, typ: f.Type, tagged: name != "", depth: depth,
				quoted: slices.Contains(strings.Split(opts, ","), "string")}
			if jf.name == "" {
				jf.name = f.Name
			}
			all = append(all, jf)
		}
	}
	walk(t, nil, 0, map[reflect.Type]bool{})
	byName := map[string][]jsonField{}
	var names []string
	for _, f := range all {
		if byName[f.name] == nil {
			names = append(names, f.name)
		}
		byName[f.name] = append(byName[f.name], f)
	}
	var out []jsonField
	for _, name := range names {
		if f, ok := dominantField(byName[name]); ok {
			out = append(out, f)
		}
	}
	return out
}

// dominantField picks, of the fields sharing one name, the one
// encoding/json encodes: the shallowest, then the only tagged one.
func dominantField(fs []jsonField) (jsonField, bool) {
	minDepth := slices.MinFunc(fs, func(a, b jsonField) int { return a.depth - b.depth }).depth
	fs = slices.DeleteFunc(slices.Clone(fs), func(f jsonField) bool { return f.depth > minDepth })
	if len(fs) == 1 {
		return fs[0], true
	}
	tagged := slices.DeleteFunc(fs, func(f jsonField) bool { return !f.tagged })
	if len(tagged) == 1 {
		return tagged[0], true
	}
	return jsonField{}, false
}

// mergeShapes unites two shapes of one place (the elements of a list, the
// values of a map): any gives way to the other; members are united.
func mergeShapes(a, b *jsonShape) *jsonShape {
	switch {
	case a == nil || a.typ == jsonAny:
		return b
	case b == nil || b.typ == jsonAny:
		return a
	}
	m := &jsonShape{typ: a.typ}
	if a.typ != b.typ {
		types := append(strings.Split(a.typ, "|"), strings.Split(b.typ, "|")...)
		slices.Sort(types)
		m.typ = strings.Join(slices.Compact(types), "|")
	}
	if a.fields != nil || b.fields != nil {
		m.fields = map[string]*jsonShape{}
		for name, f := range a.fields {
			m.fields[name] = f
		}
		for name, f := range b.fields {
			m.fields[name] = mergeShapes(m.fields[name], f)
		}
	}
	m.elem = mergeShapes(a.elem, b.elem)
	return m
}

// lines writes the shape one line per member, "PATH TYPE", the document
// itself being ".": ".jobs array", ".jobs[] object", ".jobs[].id string",
// ".queue.* object" (a map's values under any key).
func (s *jsonShape) lines(path string) []string {
	out := []string{path + " " + s.typ}
	for name, f := range s.fields {
		out = append(out, f.lines(joinPath(path, "."+name))...)
	}
	if s.elem != nil {
		sub := ".*"
		if s.typ == jsonArray {
			sub = "[]"
		}
		out = append(out, s.elem.lines(joinPath(path, sub))...)
	}
	return out
}

// joinPath appends a member to a path; the root "." is not repeated.
func joinPath(path, member string) string {
	if path == "." && strings.HasPrefix(member, ".") {
		return member
	}
	return path + member
}

// admits lists where doc, a decoded JSON document, does not fit the
// shape: a member the shape lacks, or another JSON type. null fits
// anything (nil pointers, slices and maps), and so does every document
// under any.
func (s *jsonShape) admits(path string, doc any) []string {
	if doc == nil || s.typ == jsonAny {
		return nil
	}
	if typ := jsonTypeOf(doc); !slices.Contains(strings.Split(s.typ, "|"), typ) {
		return []string{fmt.Sprintf("%s: printed a %s, derived %s", path, typ, s.typ)}
	}
	var problems []string
	switch doc := doc.(type) {
	case map[string]any:
		for name, v := range doc {
			f := s.fields[name]
			if f == nil {
				f = s.elem
			}
			if f == nil {
				problems = append(problems, fmt.Sprintf("%s: printed, not derived", joinPath(path, "."+name)))
				continue
			}
			problems = append(problems, f.admits(joinPath(path, "."+name), v)...)
		}
	case []any:
		for _, v := range doc {
			problems = append(problems, s.elem.admits(joinPath(path, "[]"), v)...)
		}
	}
	return problems
}

// jsonTypeOf is the JSON type of a value encoding/json decoded into an
// any.
func jsonTypeOf(doc any) string {
	switch doc.(type) {
	case map[string]any:
		return jsonObject
	case []any:
		return jsonArray
	case string:
		return jsonString
	case float64:
		return jsonNumber
	case bool:
		return jsonBoolean
	}
	return jsonAny
}

// shapeInner is embedded by shapeOuter: its fields are promoted, its
// Name loses to the outer one.
type shapeInner struct {
	Name  string `json:"name"`
	Depth int    `json:"depth"`
}

type shapeOuter struct {
	shapeInner
	Name     string            `json:"name"`
	Hidden   string            `json:"-"`
	Count    int64             `json:"count,omitempty,string"`
	At       time.Time         `json:"at,omitzero"`
	ID       uuid.UUID         `json:"id"`
	Raw      json.RawMessage   `json:"raw,omitempty"`
	Blob     []byte            `json:"blob,omitempty"`
	Tags     map[string]string `json:"tags,omitempty"`
	Next     *shapeOuter       `json:"next,omitempty"`
	Untagged bool
	private  int
}

// shapeLevel has its own MarshalJSON writing a number.
type shapeLevel int

func (l shapeLevel) MarshalJSON() ([]byte, error) { return json.Marshal(int(l) * 10) }

// TestShapeOf: the derived lines follow encoding/json's rules, fields
// left out when empty included.
func TestShapeOf(t *testing.T) {
	cases := []struct {
		name string
		v    any
		want []string
	}{
		{"struct fields, empty ones too", shapeOuter{}, []string{
			". object", ".Untagged boolean", ".at string", ".blob string", ".count string", ".depth number",
			".id string", ".name string", ".next object", ".raw any", ".tags object", ".tags.* string",
		}},
		{"a root map lists its keys", map[string]string{"key": "k1", "file": "f"}, []string{
			". object", ".file string", ".key string",
		}},
		{"map[string]any values by their content", map[string]any{"list": []shapeInner{}, "n": nil}, []string{
			". object", ".list array", ".list[] object", ".list[].depth number", ".list[].name string", ".n any",
		}},
		{"a nested typed map is keyed by *", struct {
			Q map[string]map[string]int64 `json:"q"`
		}{}, []string{". object", ".q object", ".q.* object", ".q.*.* number"}},
		{"a list of interfaces unites its elements", []any{shapeInner{}, map[string]any{"x": true}}, []string{
			". array", ".[] object", ".[].depth number", ".[].name string", ".[].x boolean",
		}},
		{"a Marshaler is what it writes", struct {
			L shapeLevel `json:"level"`
		}{}, []string{". object", ".level number"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := shapeOf(tc.v)
			require.NoError(t, err)
			got := s.lines(".")
			slices.Sort(got)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestShapeAdmits: a printed document that has a member, or a type, the
// shape lacks is reported, so a wrong derivation cannot pass unseen.
func TestShapeAdmits(t *testing.T) {
	s, err := shapeOf(shapeInner{})
	require.NoError(t, err)
	cases := []struct {
		doc  string
		want []string
	}{
		{`{"name": "a", "depth": 1}`, nil},
		{`{"name": null}`, nil},
		{`{"name": "a", "extra": 1}`, []string{".extra: printed, not derived"}},
		{`{"depth": "1"}`, []string{".depth: printed a string, derived number"}},
	}
	for _, tc := range cases {
		t.Run(tc.doc, func(t *testing.T) {
			var doc any
			require.NoError(t, json.Unmarshal([]byte(tc.doc), &doc))
			require.Equal(t, tc.want, s.admits(".", doc))
		})
	}
}
