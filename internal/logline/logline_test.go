package logline

import (
	"strings"
	"testing"
)

type got struct {
	text    string
	newline bool
	marker  *Attribution
}

func collect(s *Splitter, chunks ...string) []got {
	var out []got
	emit := func(p Piece) { out = append(out, got{string(p.Text), p.Newline, p.Marker}) }
	for _, c := range chunks {
		s.Write([]byte(c), emit)
	}
	s.Flush(emit)
	return out
}

func TestSplitter(t *testing.T) {
	task := Attribution{Task: "main.square"}
	mk := string(Marker(task))
	for _, c := range []struct {
		name   string
		max    int
		chunks []string
		want   []got
	}{
		{"lines", 0, []string{"a\nbb\n"}, []got{{"a", true, nil}, {"bb", true, nil}}},
		{"split across writes", 0, []string{"he", "llo\nwor", "ld\n"}, []got{{"hello", true, nil}, {"world", true, nil}}},
		{"last line without newline", 0, []string{"a\nrest"}, []got{{"a", true, nil}, {"rest", false, nil}}},
		{"empty line", 0, []string{"\n"}, []got{{"", true, nil}}},
		{"long line cut", 4, []string{"abcdefghij\n"}, []got{{"abcd", false, nil}, {"efgh", false, nil}, {"ij", true, nil}}},
		{"long line without newline cut as it comes", 4, []string{"abcdef", "gh"}, []got{{"abcd", false, nil}, {"efgh", false, nil}}},
		{"exactly max", 4, []string{"abcd\n"}, []got{{"abcd", true, nil}}},
		{"marker", 0, []string{"x\n" + mk + "y\n"}, []got{{"x", true, nil}, {"", false, &task}, {"y", true, nil}}},
		{"marker after a partial line", 0, []string{"part" + mk + "y\n"}, []got{{"part", false, nil}, {"", false, &task}, {"y", true, nil}}},
		{"marker split across writes", 0, []string{mk[:5], mk[5:]}, []got{{"", false, &task}}},
		{"broken marker is text", 0, []string{"\x1egoray:{nope\n"}, []got{{"\x1egoray:{nope", true, nil}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := collect(&Splitter{Max: c.max}, c.chunks...)
			if len(out) != len(c.want) {
				t.Fatalf("got %d pieces %+v, want %+v", len(out), out, c.want)
			}
			for i := range out {
				g, w := out[i], c.want[i]
				if g.text != w.text || g.newline != w.newline || (g.marker == nil) != (w.marker == nil) || (g.marker != nil && *g.marker != *w.marker) {
					t.Errorf("piece %d: %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

// TestSplitterBounded: a worker writing megabytes without a newline never
// makes the splitter hold more than a piece.
func TestSplitterBounded(t *testing.T) {
	s := &Splitter{Max: 1024}
	chunk := []byte(strings.Repeat("x", 4096))
	pieces := 0
	for range 1000 {
		s.Write(chunk, func(p Piece) {
			pieces++
			if len(p.Text) > 1024 {
				t.Fatalf("piece of %d bytes", len(p.Text))
			}
		})
		if len(s.buf) >= 1024 || cap(s.buf) > 4*1024+len(chunk) {
			t.Fatalf("splitter holds %d bytes (cap %d)", len(s.buf), cap(s.buf))
		}
	}
	if pieces != 4000 {
		t.Errorf("%d pieces, want 4000", pieces)
	}
}

func TestMarkerRoundTrip(t *testing.T) {
	for _, a := range []Attribution{
		{Task: "example.com/app.work"},
		{ActorClass: "main.Counter", ActorName: "two\nlines\x1e", ActorID: "00ff"},
		{ActorClass: strings.Repeat("C", 1000)},
	} {
		mk := Marker(a)
		if strings.Count(string(mk), "\n") != 1 || mk[len(mk)-1] != '\n' {
			t.Fatalf("marker %q is not one line", mk)
		}
		b, ok := ParseMarker(mk[:len(mk)-1])
		want := Attribution{Task: clip(a.Task), ActorClass: clip(a.ActorClass), ActorName: clip(a.ActorName), ActorID: a.ActorID}
		if !ok || b != want {
			t.Errorf("ParseMarker(Marker(%+v)) = %+v, %v", a, b, ok)
		}
	}
	if _, ok := ParseMarker([]byte("plain text")); ok {
		t.Error("plain text parsed as a marker")
	}
	if _, ok := ParseMarker([]byte(magic + `{"task":"` + strings.Repeat("x", maxMarker) + `"}`)); ok {
		t.Error("an oversized marker was taken")
	}
}

func TestPrefix(t *testing.T) {
	for _, c := range []struct {
		o    Origin
		want string
	}{
		{Origin{Attribution: Attribution{Task: "main.square"}, Pid: 4711, NodeID: "5c1e9a02", NodeIP: "127.0.0.2"}, "(main.square pid=4711 node=5c1e9a02 ip=127.0.0.2) "},
		{Origin{Attribution: Attribution{Task: "example.com/app/pkg.(*T).M"}, Pid: 1, NodeID: "n"}, "(pkg.(*T).M pid=1 node=n) "},
		{Origin{Attribution: Attribution{ActorClass: "main.Counter", ActorName: "c 1"}, Pid: 2, NodeID: "n", NodeIP: "ip"}, "(main.Counter name=c_1 pid=2 node=n ip=ip) "},
		{Origin{Attribution: Attribution{ActorClass: "main.Counter"}, Pid: 2, NodeID: "n"}, "(main.Counter pid=2 node=n) "},
		{Origin{Pid: 3, NodeID: "n"}, "(worker pid=3 node=n) "},
		{Origin{Attribution: Attribution{ActorClass: "A", ActorName: "\x1b[2J"}, Pid: 3, NodeID: "n"}, "(A name=?[2J pid=3 node=n) "},
	} {
		if got := Prefix(c.o); got != c.want {
			t.Errorf("Prefix(%+v) = %q, want %q", c.o, got, c.want)
		}
	}
}
