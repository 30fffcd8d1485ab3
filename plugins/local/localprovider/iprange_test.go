package localprovider

import (
	"strings"
	"testing"
)

func TestParseIPRange(t *testing.T) {
	tests := []struct {
		in          string
		first, last string
		err         string
	}{
		{"127.0.1.1-127.0.1.254", "127.0.1.1", "127.0.1.254", ""},
		{" 127.0.3.7 - 127.0.3.9 ", "127.0.3.7", "127.0.3.9", ""},
		{"127.0.0.5", "127.0.0.5", "127.0.0.5", ""},
		{"127.0.0.255-127.0.1.1", "127.0.0.255", "127.0.1.1", ""},
		{"127.0.1.9-127.0.1.1", "", "", "127.0.1.1 comes before 127.0.1.9"},
		{"127.0.1.x-127.0.1.9", "", "", `"127.0.1.x" is not an IP address`},
		{"::1", "", "", "::1 is not an IPv4 address"},
		{"0.0.0.0", "", "", "0.0.0.0 cannot be a node's address"},
		{"127.0.0.1-127.2.0.0", "", "", "spans 131072 addresses; at most 65536"},
		{"", "", "", "is not an IP address"},
	}
	for _, tc := range tests {
		r, err := parseIPRange(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "ip_range") {
				t.Errorf("parseIPRange(%q) = %v, %v; want an error saying %q", tc.in, r, err, tc.err)
			}
			continue
		}
		if err != nil || ipString(r.first) != tc.first || ipString(r.last) != tc.last {
			t.Errorf("parseIPRange(%q) = %s-%s, %v; want %s-%s", tc.in, ipString(r.first), ipString(r.last), err, tc.first, tc.last)
		}
	}
}

func TestIPRangeFree(t *testing.T) {
	r, err := parseIPRange("127.0.1.254-127.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	if r.size() != 4 {
		t.Errorf("size %d, want 4", r.size())
	}
	tests := []struct {
		used []string
		want string
		ok   bool
	}{
		{nil, "127.0.1.254", true},
		{[]string{"127.0.1.254"}, "127.0.1.255", true},
		{[]string{"127.0.1.254", "127.0.1.255", "127.0.2.0"}, "127.0.2.1", true},
		{[]string{"127.0.1.255"}, "127.0.1.254", true},
		{[]string{"127.0.1.254", "127.0.1.255", "127.0.2.0", "127.0.2.1"}, "", false},
	}
	for _, tc := range tests {
		used := map[string]bool{}
		for _, u := range tc.used {
			used[u] = true
		}
		got, ok := r.free(used)
		if got != tc.want || ok != tc.ok {
			t.Errorf("free with %v used = %q, %v; want %q, %v", tc.used, got, ok, tc.want, tc.ok)
		}
	}
}
