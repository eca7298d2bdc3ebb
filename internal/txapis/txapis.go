// Package txapis lists the exported APIs of a package that take a
// caller's transaction, for the tests that guard them (a caller's
// transaction costs one connection: internal/e2e/onetx_test.go,
// store/sqlitestore/onetx_test.go). A test fails when an API that takes a
// transaction is not in its table, so a new one cannot slip in unguarded.
package txapis

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

// List returns the exported functions, and methods of exported types, in
// dir's non-test Go files that take a transaction, named pkg.Func or
// pkg.Type.Method. A function takes a transaction when a parameter is
// named tx, or is of type pgx.Tx, *sql.Tx (any *x.Tx) or a type
// parameter named Tx.
func List(pkg, dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("txapis: %w", err)
	}
	fset := token.NewFileSet()
	var out []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("txapis: %w", err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || !fn.Name.IsExported() || !takesTx(fn) {
				continue
			}
			name := fn.Name.Name
			if fn.Recv != nil {
				recv := receiverType(fn.Recv.List[0].Type)
				if !ast.IsExported(recv) {
					continue
				}
				name = recv + "." + name
			}
			out = append(out, pkg+"."+name)
		}
	}
	return out, nil
}

func receiverType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverType(x.X)
	case *ast.IndexExpr:
		return receiverType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}

// takesTx reports whether fn has a parameter named tx, or of type
// pgx.Tx, *x.Tx or a type parameter named Tx.
func takesTx(fn *ast.FuncDecl) bool {
	typeParams := map[string]bool{}
	if fn.Type.TypeParams != nil {
		for _, f := range fn.Type.TypeParams.List {
			for _, n := range f.Names {
				typeParams[n.Name] = true
			}
		}
	}
	for _, f := range fn.Type.Params.List {
		for _, n := range f.Names {
			if n.Name == "tx" {
				return true
			}
		}
		switch ty := f.Type.(type) {
		case *ast.Ident:
			if ty.Name == "Tx" && typeParams[ty.Name] {
				return true
			}
		case *ast.SelectorExpr:
			if id, ok := ty.X.(*ast.Ident); ok && id.Name == "pgx" && ty.Sel.Name == "Tx" {
				return true
			}
		case *ast.StarExpr:
			if sel, ok := ty.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "Tx" {
				return true
			}
		}
	}
	return false
}
