// Package logline is what workers, raylets and drivers share about the
// lines a worker prints on stdout and stderr (docs/logs.md): the marker a
// worker writes when it starts a task or becomes an actor, so that its
// raylet knows whom the following lines belong to; the Splitter that cuts
// a worker's output into bounded lines and recognises markers; and the
// prefix a driver prints before each line.
package logline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxLine is the longest line, in bytes, that travels as one: longer
// lines are cut into pieces of MaxLine bytes, each printed as a line.
const MaxLine = 16 << 10

// maxField bounds each field of a marker (names the worker writes).
const maxField = 256

// maxMarker bounds a marker line; longer text is never taken for one.
const maxMarker = 4 * maxField

// magic starts a marker: an ASCII record separator that user output does
// not contain, then "goray:".
const magic = "\x1egoray:"

// Attribution is what a worker was running when it wrote a line.
type Attribution struct {
	// Task is the function name of the running task.
	Task string `json:"task,omitempty"`
	// ActorClass, ActorName and ActorID describe the actor the worker
	// hosts (ActorName is empty for an unnamed actor; ActorID is hex).
	ActorClass string `json:"actor,omitempty"`
	ActorName  string `json:"name,omitempty"`
	ActorID    string `json:"actor_id,omitempty"`
}

// IsZero reports whether a is empty (no task has started yet).
func (a Attribution) IsZero() bool { return a == Attribution{} }

func clip(s string) string {
	if len(s) <= maxField {
		return s
	}
	s = s[:maxField]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// Marker returns the line a worker writes (on stdout and on stderr) when
// it starts running what a describes; fields are cut to 256 bytes.
func Marker(a Attribution) []byte {
	a = Attribution{Task: clip(a.Task), ActorClass: clip(a.ActorClass), ActorName: clip(a.ActorName), ActorID: clip(a.ActorID)}
	b, _ := json.Marshal(a) // strings only: cannot fail; escapes newlines
	out := make([]byte, 0, len(magic)+len(b)+1)
	out = append(append(append(out, magic...), b...), '\n')
	return out
}

// ParseMarker parses a marker line (without its newline). ok is false when
// line is not a well-formed marker, which is then ordinary text.
func ParseMarker(line []byte) (a Attribution, ok bool) {
	rest, found := bytes.CutPrefix(line, []byte(magic))
	if !found || len(line) > maxMarker {
		return Attribution{}, false
	}
	if err := json.Unmarshal(rest, &a); err != nil {
		return Attribution{}, false
	}
	return Attribution{Task: clip(a.Task), ActorClass: clip(a.ActorClass), ActorName: clip(a.ActorName), ActorID: clip(a.ActorID)}, true
}

// Piece is one line, or one cut of a long line, or a marker.
type Piece struct {
	// Text is the line without its newline. It aliases the Splitter's
	// buffer: copy it before the next call.
	Text []byte
	// Newline says a newline ended the text in the output (false for the
	// first cuts of a long line, text just before a marker and a last
	// line without newline).
	Newline bool
	// Marker is set (and Text empty) for a marker.
	Marker *Attribution
}

// Splitter cuts a stream of output into Pieces of at most MaxLine bytes
// (Max when set), recognising markers wherever a line holds one. It keeps
// at most Max bytes between calls. The zero value is ready to use; it is
// not safe for concurrent use.
type Splitter struct {
	// Max is the longest piece (MaxLine when 0).
	Max int
	buf []byte
}

func (s *Splitter) max() int {
	if s.Max > 0 {
		return s.Max
	}
	return MaxLine
}

// Write feeds p and passes every complete piece to emit, in order.
func (s *Splitter) Write(p []byte, emit func(Piece)) {
	s.buf = append(s.buf, p...)
	rest := s.buf
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			if len(rest) < s.max() {
				break
			}
			i = s.max()
			s.line(rest[:i], false, emit)
			rest = rest[i:]
			continue
		}
		if i > s.max() {
			s.line(rest[:s.max()], false, emit)
			rest = rest[s.max():]
			continue
		}
		s.line(rest[:i], true, emit)
		rest = rest[i+1:]
	}
	n := copy(s.buf, rest)
	s.buf = s.buf[:n]
	if cap(s.buf) > 4*s.max() {
		s.buf = append([]byte(nil), s.buf...) // a burst's buffer is not kept
	}
}

// Flush passes the text held back (a last line without newline) to emit.
func (s *Splitter) Flush(emit func(Piece)) {
	if len(s.buf) > 0 {
		s.line(s.buf, false, emit)
	}
	s.buf = s.buf[:0]
}

// line emits one line, splitting off a marker inside it.
func (s *Splitter) line(text []byte, newline bool, emit func(Piece)) {
	i := bytes.Index(text, []byte(magic))
	if i < 0 {
		emit(Piece{Text: text, Newline: newline})
		return
	}
	if i > 0 {
		emit(Piece{Text: text[:i]})
	}
	if a, ok := ParseMarker(text[i:]); ok {
		emit(Piece{Marker: &a})
		return
	}
	emit(Piece{Text: text[i:], Newline: newline})
}

// Origin is where a line comes from, as a driver prints it.
type Origin struct {
	Attribution
	Pid    int32
	NodeID string // short (8 hex digits)
	NodeIP string
}

// Prefix returns what a driver prints before each line of o (with a
// trailing space):
//
//	(main.square pid=4711 node=5c1e9a02 ip=127.0.0.2)
//	(main.Counter name=counter pid=4712 node=5c1e9a02 ip=127.0.0.2)
//	(worker pid=4713 node=5c1e9a02 ip=127.0.0.2)
//
// naming the task's function (its import path cut off) or the actor's
// class and, when named, name; the last form is a worker that has run no
// task yet.
func Prefix(o Origin) string {
	var b strings.Builder
	b.WriteByte('(')
	switch {
	case o.ActorClass != "":
		b.WriteString(shortName(o.ActorClass))
		if o.ActorName != "" {
			fmt.Fprintf(&b, " name=%s", printable(o.ActorName))
		}
	case o.Task != "":
		b.WriteString(shortName(o.Task))
	default:
		b.WriteString("worker")
	}
	fmt.Fprintf(&b, " pid=%d node=%s", o.Pid, printable(o.NodeID))
	if o.NodeIP != "" {
		fmt.Fprintf(&b, " ip=%s", printable(o.NodeIP))
	}
	b.WriteString(") ")
	return b.String()
}

// shortName cuts the import path off a Go symbol name
// ("example.com/app/pkg.(*T).M" becomes "pkg.(*T).M").
func shortName(name string) string {
	name = printable(name)
	paren := strings.IndexByte(name, '(')
	head := name
	if paren >= 0 {
		head = name[:paren]
	}
	if i := strings.LastIndexByte(head, '/'); i >= 0 {
		return name[i+1:]
	}
	return name
}

// printable replaces control characters (which a worker could use to
// rewrite the driver's terminal) and spaces with '?' and '_'.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == ' ':
			return '_'
		case r < 0x20 || r == 0x7f:
			return '?'
		}
		return r
	}, s)
}
