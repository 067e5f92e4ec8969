package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
)

// goPkg is what one directory's Go files declare: top-level names, and
// per type its methods and fields (interface methods included).
type goPkg struct {
	decls   map[string]bool
	types   map[string]bool
	members map[string]map[string]bool
}

func parsePkg(files []string) (*goPkg, error) {
	p := &goPkg{decls: map[string]bool{}, types: map[string]bool{}, members: map[string]map[string]bool{}}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", f, err)
		}
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					p.decls[d.Name.Name] = true
					continue
				}
				if recv := receiverType(d.Recv.List[0].Type); recv != "" {
					p.member(recv, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						p.decls[s.Name.Name] = true
						p.types[s.Name.Name] = true
						p.addFields(s.Name.Name, s.Type)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							p.decls[n.Name] = true
						}
					}
				}
			}
		}
	}
	return p, nil
}

func (p *goPkg) member(typ, name string) {
	if p.members[typ] == nil {
		p.members[typ] = map[string]bool{}
	}
	p.members[typ][name] = true
}

func (p *goPkg) addFields(typ string, e ast.Expr) {
	var list *ast.FieldList
	switch e := e.(type) {
	case *ast.StructType:
		list = e.Fields
	case *ast.InterfaceType:
		list = e.Methods
	default:
		return
	}
	for _, f := range list.List {
		for _, n := range f.Names {
			p.member(typ, n.Name)
		}
		if len(f.Names) == 0 { // embedded: reachable by its type's name
			if n := receiverType(f.Type); n != "" {
				p.member(typ, n)
			}
		}
	}
}

// receiverType is the type name of a receiver or embedded field: T, *T,
// T[P], *T[P], pkg.T.
func receiverType(e ast.Expr) string {
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
