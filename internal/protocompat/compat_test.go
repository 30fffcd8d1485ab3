package protocompat

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/goray-dev/goray/internal/testservers/testbin"
)

var update = flag.Bool("update", false, "rewrite sdk/proto/v1.txtpb from the current protocols (only when they break nothing: a release of v1 additions)")

// baseline is the released contract, relative to the module root.
const baseline = "sdk/proto/v1.txtpb"

// current compiles the public protocols as they are now.
func current(t *testing.T) (*descriptorpb.FileDescriptorSet, string) {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	protoc, err := testbin.Find(testbin.Spec{What: "protoc", Env: "GORAY_TEST_PROTOC", Commands: []string{"protoc"},
		Install: "run `make protoc` (it installs Debian's protobuf-compiler package)"})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "sdk", "proto")
	files, err := filepath.Glob(filepath.Join(dir, "goray", "*", "v1", "*.proto"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no protocol under %s/goray/*/v1: %v", dir, err)
	}
	out := filepath.Join(t.TempDir(), "set.pb")
	args := []string{"-I", dir, "--descriptor_set_out=" + out}
	for _, f := range files {
		rel, _ := filepath.Rel(dir, f)
		args = append(args, rel)
	}
	if b, err := exec.Command(protoc, args...).CombinedOutput(); err != nil {
		t.Fatalf("protoc %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	set := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(b, set); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(set.File, func(a, b *descriptorpb.FileDescriptorProto) int { return strings.Compare(a.GetName(), b.GetName()) })
	return set, root
}

// TestPublicProtocolsCompatible: the public protocols break nothing of the
// released v1 contract.
func TestPublicProtocolsCompatible(t *testing.T) {
	cur, root := current(t)
	path := filepath.Join(root, baseline)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old := &descriptorpb.FileDescriptorSet{}
	if err := prototext.Unmarshal(b, old); err != nil {
		t.Fatalf("%s: %v", baseline, err)
	}
	if breaks := Breaks(old, cur); len(breaks) > 0 {
		t.Fatalf("the plugin protocols under sdk/proto break the released v1 contract (%s):\n  %s\n"+
			"A plugin built against v1 would fail with this runtime. Grow a protocol by adding fields (new numbers) and methods; a change that must break goes to new v2 packages.",
			baseline, strings.Join(breaks, "\n  "))
	}
	if *update {
		text, err := prototext.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(cur)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append([]byte("# The released v1 contract of goray's plugin protocols (sdk/proto/goray/*/v1),\n# a FileDescriptorSet checked by internal/protocompat; see sdk/proto/README.md.\n"), text...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBreaksFound: each kind of breaking change is reported, and additions
// are not.
func TestBreaksFound(t *testing.T) {
	base, _ := current(t)
	msg := func(set *descriptorpb.FileDescriptorSet, name string) *descriptorpb.DescriptorProto {
		for _, f := range set.File {
			for _, m := range f.MessageType {
				if "."+f.GetPackage()+"."+m.GetName() == name {
					return m
				}
			}
		}
		t.Fatalf("no message %s", name)
		return nil
	}
	svc := func(set *descriptorpb.FileDescriptorSet) *descriptorpb.ServiceDescriptorProto {
		for _, f := range set.File {
			if f.GetPackage() == "goray.transport.v1" {
				return f.Service[0]
			}
		}
		t.Fatal("no transport service")
		return nil
	}
	const msgName = ".goray.transport.v1.Buffer"
	tests := []struct {
		name   string
		change func(set *descriptorpb.FileDescriptorSet)
		want   string // "" : nothing breaks
	}{
		{"a field added", func(s *descriptorpb.FileDescriptorSet) {
			m := msg(s, msgName)
			m.Field = append(m.Field, &descriptorpb.FieldDescriptorProto{Name: proto.String("added"), Number: proto.Int32(999), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()})
		}, ""},
		{"a method added", func(s *descriptorpb.FileDescriptorSet) {
			v := svc(s)
			m := proto.Clone(v.Method[0]).(*descriptorpb.MethodDescriptorProto)
			m.Name = proto.String("Added")
			v.Method = append(v.Method, m)
		}, ""},
		{"a field removed", func(s *descriptorpb.FileDescriptorSet) {
			m := msg(s, msgName)
			m.Field = m.Field[1:]
		}, "was removed"},
		{"a field renumbered", func(s *descriptorpb.FileDescriptorSet) {
			msg(s, msgName).Field[0].Number = proto.Int32(998)
		}, "was removed"},
		{"a field renamed", func(s *descriptorpb.FileDescriptorSet) {
			msg(s, msgName).Field[0].Name = proto.String("renamed")
		}, "was renamed renamed"},
		{"a field's type changed", func(s *descriptorpb.FileDescriptorSet) {
			f := msg(s, msgName).Field[0]
			f.Type = descriptorpb.FieldDescriptorProto_TYPE_DOUBLE.Enum()
			f.TypeName = nil
		}, "changed type"},
		{"a field made repeated", func(s *descriptorpb.FileDescriptorSet) {
			f := msg(s, msgName).Field[0]
			if f.GetLabel() == descriptorpb.FieldDescriptorProto_LABEL_REPEATED {
				f.Label = descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
			} else {
				f.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
			}
		}, "changed from"},
		{"a message removed", func(s *descriptorpb.FileDescriptorSet) {
			for _, f := range s.File {
				if f.GetPackage() == "goray.transport.v1" {
					f.MessageType = slices.DeleteFunc(f.MessageType, func(m *descriptorpb.DescriptorProto) bool { return m.GetName() == "Buffer" })
				}
			}
		}, "message .goray.transport.v1.Buffer was removed"},
		{"a method removed", func(s *descriptorpb.FileDescriptorSet) {
			v := svc(s)
			v.Method = v.Method[1:]
		}, "was removed"},
		{"a method's request changed", func(s *descriptorpb.FileDescriptorSet) {
			svc(s).Method[0].InputType = proto.String(msgName)
		}, "changed from"},
		{"a method made streaming", func(s *descriptorpb.FileDescriptorSet) {
			m := svc(s).Method[0]
			m.ServerStreaming = proto.Bool(!m.GetServerStreaming())
		}, "changed its streaming"},
		{"a service removed", func(s *descriptorpb.FileDescriptorSet) {
			for _, f := range s.File {
				if f.GetPackage() == "goray.transport.v1" {
					f.Service = nil
				}
			}
		}, "service .goray.transport.v1.Transport was removed"},
		{"a package renamed", func(s *descriptorpb.FileDescriptorSet) {
			for _, f := range s.File {
				if f.GetPackage() == "goray.transport.v1" {
					f.Package = proto.String("goray.transport.v2")
				}
			}
		}, "moved from package goray.transport.v1 to goray.transport.v2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := proto.Clone(base).(*descriptorpb.FileDescriptorSet)
			tt.change(cur)
			breaks := Breaks(base, cur)
			if tt.want == "" {
				if len(breaks) > 0 {
					t.Fatalf("an addition reported as breaking: %v", breaks)
				}
				return
			}
			if !slices.ContainsFunc(breaks, func(b string) bool { return strings.Contains(b, tt.want) }) {
				t.Fatalf("breaks %q, want one saying %q", breaks, tt.want)
			}
		})
	}
}
