package digest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFileSHA256(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := FileSHA256(p)
	if want := "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; err != nil || got != want {
		t.Fatalf("FileSHA256 = %q, %v; want %q", got, err, want)
	}
	if _, err := FileSHA256(filepath.Join(t.TempDir(), "missing")); !os.IsNotExist(err) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestValidSHA256(t *testing.T) {
	good := "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	for s, want := range map[string]bool{
		good:                   true,
		"":                     false,
		good[:63]:              false,
		good + "0":             false,
		"BA" + good[2:]:        false, // FileSHA256 writes lowercase
		"zz" + good[2:]:        false,
		"../../../../bin/sh00": false,
	} {
		if got := ValidSHA256(s); got != want {
			t.Errorf("ValidSHA256(%q) = %v, want %v", s, got, want)
		}
	}
}
