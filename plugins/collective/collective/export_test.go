package collective

// WireVersion is wireVersion, for the external tests that write records
// by hand.
const WireVersion = wireVersion
