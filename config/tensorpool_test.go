package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestTensorPool(t *testing.T) {
	const base = "address = \"10.0.0.1:6380\"\n"
	n, diags := Parse([]byte(base), "goray.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if p := n.TensorPool; p.MaxMemory != 4<<30 || p.IdleTimeout != 30*time.Second {
		t.Fatalf("defaults: %+v, want 4 GiB and 30s", p)
	}

	ok := []struct {
		src  string
		max  int64
		idle time.Duration
	}{
		{"tensor_pool {\n  max_memory = \"512MiB\"\n  idle_timeout = \"5s\"\n}\n", 512 << 20, 5 * time.Second},
		{"tensor_pool {\n  max_memory = \"0\"\n}\n", 0, 30 * time.Second},
		{"tensor_pool {\n  max_memory = \"0\"\n  idle_timeout = \"0s\"\n}\n", 0, 0},
	}
	for _, tc := range ok {
		n, diags := Parse([]byte(base+tc.src), "goray.hcl")
		if diags.HasErrors() {
			t.Fatalf("%q: %v", tc.src, diags)
		}
		if vd := n.Validate(); len(vd) != 0 {
			t.Fatalf("%q: Validate() = %v", tc.src, vd)
		}
		if p := n.TensorPool; p.MaxMemory != tc.max || p.IdleTimeout != tc.idle {
			t.Fatalf("%q: got %+v", tc.src, p)
		}
	}

	bad := []diagCase{
		{name: "no idle timeout", src: base + "tensor_pool {\n  idle_timeout = \"0s\"\n}\n",
			line: 3, col: 18, want: []string{"tensor_pool.idle_timeout", "must be positive"}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			if diags.HasErrors() {
				t.Fatalf("Parse: %v", diags)
			}
			checkDiag(t, n.Validate(), n.Files(), tc)
		})
	}

	decodeErrs := []diagCase{
		{name: "size not a size", src: base + "tensor_pool {\n  max_memory = \"lots\"\n}\n",
			line: 3, col: 16, want: []string{"max_memory", `"lots"`}},
		{name: "unknown attribute", src: base + "tensor_pool {\n  max_memroy = \"1GiB\"\n}\n",
			line: 3, col: 3, want: []string{"max_memroy", "max_memory"}},
	}
	for _, tc := range decodeErrs {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			checkDiag(t, diags, n.Files(), tc)
		})
	}
}

// TestTensorPoolDoc: the block docs/memory.md shows parses to the defaults.
func TestTensorPoolDoc(t *testing.T) {
	doc, err := os.ReadFile("../docs/memory.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```hcl\ntensor_pool {")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/memory.md shows no tensor_pool block")
	}
	n, diags := Parse([]byte("address = \"10.0.0.1:6380\"\ntensor_pool {"+block), "memory.md")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if vd := n.Validate(); len(vd) != 0 {
		t.Fatal(vd)
	}
	if p := n.TensorPool; p.MaxMemory != DefaultTensorPoolMaxMemory || p.IdleTimeout != DefaultTensorPoolIdleTimeout {
		t.Fatalf("the documented block gives %+v, not the defaults it says it shows", p)
	}
}
