package limits

import "fmt"

// MaxActorNamespaceLen is the longest actor namespace, in bytes.
const MaxActorNamespaceLen = 256

// CheckActorNamespace checks an actor namespace as both the driver and
// the GCS do: at most MaxActorNamespaceLen bytes, no control characters.
// The error says which rule ns breaks.
func CheckActorNamespace(ns string) error {
	if len(ns) > MaxActorNamespaceLen {
		return fmt.Errorf("%d bytes, more than the %d allowed", len(ns), MaxActorNamespaceLen)
	}
	for _, r := range ns {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%q holds a control character", ns)
		}
	}
	return nil
}
