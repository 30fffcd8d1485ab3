package localprovider

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// maxRange bounds how many addresses an ip_range may span.
const maxRange = 1 << 16

// ipRange is an inclusive range of IPv4 addresses.
type ipRange struct {
	first, last uint32
}

// parseIPRange reads "a.b.c.d-e.f.g.h" (inclusive) or a single address.
func parseIPRange(s string) (ipRange, error) {
	lo, hi, isRange := strings.Cut(strings.TrimSpace(s), "-")
	if !isRange {
		hi = lo
	}
	first, err := parseIPv4(lo)
	if err != nil {
		return ipRange{}, fmt.Errorf("ip_range %q: %v", s, err)
	}
	last, err := parseIPv4(hi)
	if err != nil {
		return ipRange{}, fmt.Errorf("ip_range %q: %v", s, err)
	}
	switch {
	case last < first:
		return ipRange{}, fmt.Errorf("ip_range %q: %s comes before %s", s, strings.TrimSpace(hi), strings.TrimSpace(lo))
	case last-first >= maxRange:
		return ipRange{}, fmt.Errorf("ip_range %q spans %d addresses; at most %d are allowed", s, uint64(last-first)+1, maxRange)
	}
	return ipRange{first: first, last: last}, nil
}

func parseIPv4(s string) (uint32, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not an IP address", strings.TrimSpace(s))
	}
	if !a.Is4() {
		return 0, fmt.Errorf("%s is not an IPv4 address", a)
	}
	if a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return 0, fmt.Errorf("%s cannot be a node's address", a)
	}
	b := a.As4()
	return binary.BigEndian.Uint32(b[:]), nil
}

func ipString(n uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], n)
	return netip.AddrFrom4(b).String()
}

// size is the number of addresses in r.
func (r ipRange) size() int { return int(r.last-r.first) + 1 }

// free returns the first address of r that is not in used.
func (r ipRange) free(used map[string]bool) (string, bool) {
	for n := r.first; ; n++ {
		if ip := ipString(n); !used[ip] {
			return ip, true
		}
		if n == r.last {
			return "", false
		}
	}
}
