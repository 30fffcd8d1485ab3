package layout

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocumentedIdentifiersExist reads every `pkg.Name` (and
// `pkg.Type.Member`) written in code spans of the living documents
// (README.md, CONTRIBUTING.md, docs/*.md) whose pkg is the name of one of
// the module's packages, and fails, at file:line, on each that no such
// package declares: a renamed or removed identifier must take its
// documents with it. Name may be a method of one of the package's types
// (raylet.MetricsStats); Members of a type are its methods and fields. Names of other
// languages' APIs (Ray's Python ray.get) are lower case and not checked.
func TestDocumentedIdentifiersExist(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	decls, err := moduleDecls(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(decls["ray"]) == 0 || len(decls["raylet"]) == 0 {
		t.Fatalf("found no declarations of packages ray and raylet under %s", root)
	}
	docs := []string{"README.md", "CONTRIBUTING.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		r, _ := filepath.Rel(root, m)
		docs = append(docs, r)
	}
	checked := 0
	for _, doc := range docs {
		for _, ref := range documentedRefs(t, filepath.Join(root, doc)) {
			names, ok := decls[ref.pkg]
			if !ok {
				continue
			}
			checked++
			if !names[ref.name] && !names["."+ref.name] {
				t.Errorf("%s:%d: `%s`: package %s declares no %s", doc, ref.line, ref.text, ref.pkg, ref.name)
			} else if ref.member != "" && names["type "+ref.name] && !names[ref.name+"."+ref.member] {
				t.Errorf("%s:%d: `%s`: %s.%s has no method or field %s", doc, ref.line, ref.text, ref.pkg, ref.name, ref.member)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d documented identifiers; the documents name far more", checked)
	}
}

// docRef is one pkg.Name[.Member] found in a document's code span.
type docRef struct {
	line                    int
	text, pkg, name, member string
}

var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	qualID   = regexp.MustCompile(`(?:^|[^\w./])([a-z][a-z0-9_]*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)
)

// documentedRefs returns the qualified identifiers in the code spans of
// the markdown file path (fenced blocks are skipped: their code is run by
// the acceptance tests).
func documentedRefs(t *testing.T, path string) []docRef {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var refs []docRef
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fenced := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, span := range codeSpan.FindAllStringSubmatch(line, -1) {
			for _, m := range qualID.FindAllStringSubmatch(span[1], -1) {
				refs = append(refs, docRef{line: n, text: strings.TrimLeft(m[0], " ([{,*&!"), pkg: m[1], name: m[2], member: m[3]})
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return refs
}

// moduleDecls maps each package name of the module (packages sharing a
// name are merged) to its top-level identifiers, "type T" for its types,
// Type.Member for the methods and struct fields of its types and .Method
// for each method name (documents write raylet.MetricsStats for the
// Raylet's method). Tests, testdata and the
// git-ignored tool folders are left out.
func moduleDecls(root string) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "bin"):
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		names := out[file.Name.Name]
		if names == nil {
			names = map[string]bool{}
			out[file.Name.Name] = names
		}
		for _, decl := range file.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					names[d.Name.Name] = true
					continue
				}
				names[recvName(d.Recv.List[0].Type)+"."+d.Name.Name] = true
				names["."+d.Name.Name] = true
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
						names["type "+s.Name.Name] = true
						addMembers(names, s.Name.Name, s.Type)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
		return nil
	})
	return out, err
}

// recvName is the name of the type a receiver or an embedded field names
// (T, *T, T[P], *T[P], pkg.T, *pkg.T).
func recvName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// addMembers records the fields of a struct type and the methods of an
// interface type declared as typ.
func addMembers(names map[string]bool, typ string, e ast.Expr) {
	var fields *ast.FieldList
	switch x := e.(type) {
	case *ast.StructType:
		fields = x.Fields
	case *ast.InterfaceType:
		fields = x.Methods
	default:
		return
	}
	for _, f := range fields.List {
		for _, n := range f.Names {
			names[typ+"."+n.Name] = true
		}
		if len(f.Names) == 0 { // embedded: its type's name is a member too
			names[typ+"."+recvName(f.Type)] = true
		}
	}
}
