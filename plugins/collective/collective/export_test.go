package collective

// WireVersion is wireVersion, for the external tests that write records
// by hand.
const WireVersion = wireVersion

// Running reports whether rank's member of group is running a collective
// (holds its turn), for tests that must act while one is under way.
func (t *Transport) Running(group string, rank int) bool {
	m, err := t.member(group, rank)
	return err == nil && len(m.ops) > 0
}

// Broken reports whether rank's member of group knows its group is broken.
func (t *Transport) Broken(group string, rank int) bool {
	m, err := t.member(group, rank)
	return err == nil && m.failure() != nil
}
