// Package protocompat checks that the public plugin protocols
// (sdk/proto/goray/<kind>/v1) stay compatible with the released contract:
// a plugin built against a released version must keep working with every
// later runtime, and the other way round. The released contract is a
// committed descriptor set (sdk/proto/v1.txtpb); Breaks lists what a
// current descriptor set changes of it in a way that breaks the wire or
// the generated code of another language.
package protocompat

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/descriptorpb"
)

// Breaks lists, one sentence each and sorted, what cur breaks of old:
// a message, enum, service or method gone; a field gone, renumbered,
// renamed, or of another type or cardinality; an enum value gone or
// renamed; a method whose request, response or streaming changed; a
// package's file moved out of its package. Additions break nothing.
func Breaks(old, cur *descriptorpb.FileDescriptorSet) []string {
	o, c := index(old), index(cur)
	var out []string
	for name, m := range o.messages {
		n, ok := c.messages[name]
		if !ok {
			out = append(out, fmt.Sprintf("message %s was removed", name))
			continue
		}
		fields := map[int32]*descriptorpb.FieldDescriptorProto{}
		for _, f := range n.GetField() {
			fields[f.GetNumber()] = f
		}
		for _, f := range m.GetField() {
			g, ok := fields[f.GetNumber()]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("field %s.%s (%d) was removed", name, f.GetName(), f.GetNumber()))
			case g.GetName() != f.GetName():
				out = append(out, fmt.Sprintf("field %s.%s (%d) was renamed %s", name, f.GetName(), f.GetNumber(), g.GetName()))
			case g.GetType() != f.GetType() || g.GetTypeName() != f.GetTypeName():
				out = append(out, fmt.Sprintf("field %s.%s (%d) changed type from %s to %s", name, f.GetName(), f.GetNumber(), typeOf(f), typeOf(g)))
			case g.GetLabel() != f.GetLabel():
				out = append(out, fmt.Sprintf("field %s.%s (%d) changed from %s to %s", name, f.GetName(), f.GetNumber(), labelOf(f), labelOf(g)))
			case (f.OneofIndex == nil) != (g.OneofIndex == nil):
				out = append(out, fmt.Sprintf("field %s.%s (%d) moved into or out of a oneof", name, f.GetName(), f.GetNumber()))
			}
		}
	}
	for name, e := range o.enums {
		n, ok := c.enums[name]
		if !ok {
			out = append(out, fmt.Sprintf("enum %s was removed", name))
			continue
		}
		values := map[int32]string{}
		for _, v := range n.GetValue() {
			values[v.GetNumber()] = v.GetName()
		}
		for _, v := range e.GetValue() {
			switch got, ok := values[v.GetNumber()]; {
			case !ok:
				out = append(out, fmt.Sprintf("enum value %s.%s (%d) was removed", name, v.GetName(), v.GetNumber()))
			case got != v.GetName():
				out = append(out, fmt.Sprintf("enum value %s.%s (%d) was renamed %s", name, v.GetName(), v.GetNumber(), got))
			}
		}
	}
	for name, s := range o.services {
		n, ok := c.services[name]
		if !ok {
			out = append(out, fmt.Sprintf("service %s was removed", name))
			continue
		}
		methods := map[string]*descriptorpb.MethodDescriptorProto{}
		for _, m := range n.GetMethod() {
			methods[m.GetName()] = m
		}
		for _, m := range s.GetMethod() {
			g, ok := methods[m.GetName()]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("method %s/%s was removed", name, m.GetName()))
			case g.GetInputType() != m.GetInputType() || g.GetOutputType() != m.GetOutputType():
				out = append(out, fmt.Sprintf("method %s/%s changed from (%s) returns (%s) to (%s) returns (%s)", name, m.GetName(),
					m.GetInputType(), m.GetOutputType(), g.GetInputType(), g.GetOutputType()))
			case g.GetClientStreaming() != m.GetClientStreaming() || g.GetServerStreaming() != m.GetServerStreaming():
				out = append(out, fmt.Sprintf("method %s/%s changed its streaming", name, m.GetName()))
			}
		}
	}
	for file, pkg := range o.packages {
		if got, ok := c.packages[file]; ok && got != pkg {
			out = append(out, fmt.Sprintf("file %s moved from package %s to %s", file, pkg, got))
		}
	}
	slices.Sort(out)
	return out
}

type indexed struct {
	messages map[string]*descriptorpb.DescriptorProto
	enums    map[string]*descriptorpb.EnumDescriptorProto
	services map[string]*descriptorpb.ServiceDescriptorProto
	packages map[string]string // file → package
}

// index names every message, enum and service of set by its full name.
func index(set *descriptorpb.FileDescriptorSet) indexed {
	x := indexed{
		messages: map[string]*descriptorpb.DescriptorProto{},
		enums:    map[string]*descriptorpb.EnumDescriptorProto{},
		services: map[string]*descriptorpb.ServiceDescriptorProto{},
		packages: map[string]string{},
	}
	var walk func(prefix string, ms []*descriptorpb.DescriptorProto, es []*descriptorpb.EnumDescriptorProto)
	walk = func(prefix string, ms []*descriptorpb.DescriptorProto, es []*descriptorpb.EnumDescriptorProto) {
		for _, e := range es {
			x.enums[prefix+e.GetName()] = e
		}
		for _, m := range ms {
			name := prefix + m.GetName()
			x.messages[name] = m
			walk(name+".", m.GetNestedType(), m.GetEnumType())
		}
	}
	for _, f := range set.GetFile() {
		x.packages[f.GetName()] = f.GetPackage()
		prefix := "." + f.GetPackage() + "."
		walk(prefix, f.GetMessageType(), f.GetEnumType())
		for _, s := range f.GetService() {
			x.services[prefix+s.GetName()] = s
		}
	}
	return x
}

func typeOf(f *descriptorpb.FieldDescriptorProto) string {
	t := strings.ToLower(strings.TrimPrefix(f.GetType().String(), "TYPE_"))
	if f.GetTypeName() != "" {
		t += " " + f.GetTypeName()
	}
	return t
}

func labelOf(f *descriptorpb.FieldDescriptorProto) string {
	if f.GetLabel() == descriptorpb.FieldDescriptorProto_LABEL_REPEATED {
		return "repeated"
	}
	return "singular"
}
