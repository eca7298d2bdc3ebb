// Command openapicompat compares two OpenAPI documents of AX's HTTP API
// (axhttp/openapi.json) and fails when the newer would break a client
// written against the older: a path or operation removed, a parameter or
// schema property removed or retyped, a parameter or property newly
// required. Additions are compatible. .ci/apicheck runs it against the
// last release's document.
//
// Usage:
//
//	go run ./internal/openapicompat OLD.json NEW.json
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: openapicompat OLD.json NEW.json")
		os.Exit(2)
	}
	oldDoc, err := load(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "openapicompat:", err)
		os.Exit(2)
	}
	newDoc, err := load(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "openapicompat:", err)
		os.Exit(2)
	}
	problems := compare(oldDoc, newDoc)
	if len(problems) > 0 {
		fmt.Println("openapicompat: incompatible changes to the HTTP API:")
		for _, p := range problems {
			fmt.Println("-", p)
		}
		os.Exit(1)
	}
	fmt.Println("openapicompat: the HTTP API is compatible")
}

// doc is a decoded OpenAPI document.
type doc map[string]any

func load(path string) (doc, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d doc
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// compare lists what in newDoc breaks a client of oldDoc, sorted.
func compare(oldDoc, newDoc doc) []string {
	var out []string
	oldPaths, newPaths := obj(oldDoc["paths"]), obj(newDoc["paths"])
	for path, oldItem := range oldPaths {
		newItem, ok := newPaths[path]
		if !ok {
			out = append(out, fmt.Sprintf("path %s removed", path))
			continue
		}
		for method, oldOp := range obj(oldItem) {
			if method == "parameters" {
				out = append(out, compareParams(path, obj(oldItem)["parameters"], obj(newItem)["parameters"])...)
				continue
			}
			newOp, ok := obj(newItem)[method]
			if !ok {
				out = append(out, fmt.Sprintf("%s %s removed", method, path))
				continue
			}
			where := method + " " + path
			out = append(out, compareParams(where, obj(oldOp)["parameters"], obj(newOp)["parameters"])...)
			out = append(out, compareSchema(where+" request body", requestSchema(oldOp), requestSchema(newOp))...)
		}
	}
	oldSchemas := obj(obj(oldDoc["components"])["schemas"])
	newSchemas := obj(obj(newDoc["components"])["schemas"])
	for name, old := range oldSchemas {
		n, ok := newSchemas[name]
		if !ok {
			out = append(out, fmt.Sprintf("schema %s removed", name))
			continue
		}
		out = append(out, compareSchema("schema "+name, obj(old), obj(n))...)
	}
	sort.Strings(out)
	return out
}

// compareParams: a parameter (by name and place) may not disappear, change
// type or become required.
func compareParams(where string, oldList, newList any) []string {
	var out []string
	key := func(p map[string]any) string { return fmt.Sprint(p["in"], ":", p["name"]) }
	newByKey := map[string]map[string]any{}
	for _, p := range arr(newList) {
		newByKey[key(obj(p))] = obj(p)
	}
	oldByKey := map[string]bool{}
	for _, p := range arr(oldList) {
		op := obj(p)
		oldByKey[key(op)] = true
		np, ok := newByKey[key(op)]
		if !ok {
			out = append(out, fmt.Sprintf("%s: parameter %s removed", where, key(op)))
			continue
		}
		if np["required"] == true && op["required"] != true {
			out = append(out, fmt.Sprintf("%s: parameter %s now required", where, key(op)))
		}
		out = append(out, compareSchema(where+" parameter "+key(op), obj(op["schema"]), obj(np["schema"]))...)
	}
	for k, np := range newByKey {
		if !oldByKey[k] && np["required"] == true {
			out = append(out, fmt.Sprintf("%s: new required parameter %s", where, k))
		}
	}
	return out
}

// compareSchema: properties may not disappear or change type, and no
// property may become required; a $ref must keep pointing at the same
// schema (which is compared on its own).
func compareSchema(where string, old, new map[string]any) []string {
	if old == nil {
		return nil
	}
	if new == nil {
		return []string{where + ": schema removed"}
	}
	var out []string
	if o, n := old["$ref"], new["$ref"]; o != nil && o != n {
		out = append(out, fmt.Sprintf("%s: refers to %v, was %v", where, n, o))
	}
	if o, n := old["type"], new["type"]; o != nil && fmt.Sprint(o) != fmt.Sprint(n) {
		out = append(out, fmt.Sprintf("%s: type %v, was %v", where, n, o))
	}
	if oe := arr(old["enum"]); oe != nil {
		ne := arr(new["enum"])
		for _, v := range oe {
			if ne != nil && !slices.Contains(ne, v) {
				out = append(out, fmt.Sprintf("%s: value %v removed", where, v))
			}
		}
	}
	oldReq := map[string]bool{}
	for _, r := range arr(old["required"]) {
		oldReq[fmt.Sprint(r)] = true
	}
	for _, r := range arr(new["required"]) {
		if !oldReq[fmt.Sprint(r)] {
			out = append(out, fmt.Sprintf("%s: property %v now required", where, r))
		}
	}
	newProps := obj(new["properties"])
	for name, op := range obj(old["properties"]) {
		np, ok := newProps[name]
		if !ok {
			out = append(out, fmt.Sprintf("%s: property %s removed", where, name))
			continue
		}
		out = append(out, compareSchema(where+"."+name, obj(op), obj(np))...)
	}
	out = append(out, compareSchema(where+"[]", obj(old["items"]), obj(new["items"]))...)
	return out
}

func requestSchema(op any) map[string]any {
	return obj(obj(obj(obj(obj(op)["requestBody"])["content"])["application/json"])["schema"])
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func arr(v any) []any {
	a, _ := v.([]any)
	return a
}
