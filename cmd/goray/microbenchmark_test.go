package main

import (
	"strings"
	"testing"
)

func TestReplaceBetween(t *testing.T) {
	doc := "# Title\nintro\n" + docBegin + "\nold table\n" + docEnd + "\nanalysis\n"
	got, err := replaceBetween(doc, docBegin, docEnd, "new table\n\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Title\nintro\n" + docBegin + "\nnew table\n" + docEnd + "\nanalysis\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := replaceBetween("no markers", docBegin, docEnd, "x"); err == nil || !strings.Contains(err.Error(), "section") {
		t.Fatalf("missing markers: %v", err)
	}
	if _, err := replaceBetween(docEnd+docBegin, docBegin, docEnd, "x"); err == nil {
		t.Fatal("markers in the wrong order accepted")
	}
}
