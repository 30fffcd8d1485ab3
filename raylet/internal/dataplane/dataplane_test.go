package dataplane

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

func TestDataRange(t *testing.T) {
	tests := []struct {
		off, length, size int64
		wantOff, wantLen  int64
		err               string
	}{
		{0, -1, 10, 0, 10, ""},
		{3, -1, 10, 3, 7, ""},
		{10, -1, 10, 10, 0, ""},
		{0, 0, 0, 0, 0, ""},
		{2, 5, 10, 2, 5, ""},
		{8, 5, 10, 8, 2, ""},
		{0, math.MaxInt64, 10, 0, 10, ""},
		{1, math.MaxInt64, 10, 0, 0, "overflows"},
		{math.MaxInt64, 1, 10, 0, 0, "outside"},
		{11, 0, 10, 0, 0, "outside"},
		{-1, 1, 10, 0, 0, "negative"},
		{math.MinInt64, 1, 10, 0, 0, "negative"},
		{0, -2, 10, 0, 0, "negative"},
		{0, math.MinInt64, 10, 0, 0, "negative"},
		{0, 1, -1, 0, 0, "size -1 is negative"},
	}
	for _, tt := range tests {
		off, n, err := Range(tt.off, tt.length, tt.size)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Range(%d, %d, %d) = %v, want an error saying %q", tt.off, tt.length, tt.size, err, tt.err)
			}
			continue
		}
		if err != nil || off != tt.wantOff || n != tt.wantLen {
			t.Errorf("Range(%d, %d, %d) = %d, %d, %v; want %d, %d", tt.off, tt.length, tt.size, off, n, err, tt.wantOff, tt.wantLen)
		}
	}
}

// okHeader is a response header saying ok, size, metadata length n.
func okHeader(size int64, n uint32) []byte {
	b := make([]byte, 13)
	binary.BigEndian.PutUint64(b[1:], uint64(size))
	binary.BigEndian.PutUint32(b[9:], n)
	return b
}

// refusal is a refusal with a message length field of l and msg.
func refusal(status byte, l uint32, msg string) []byte {
	b := make([]byte, 17)
	b[0] = status
	binary.BigEndian.PutUint32(b[13:], l)
	return append(b, msg...)
}

func TestReadResponse(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		off  int64
		size int64
		meta string
		err  string
	}{
		{"ok", append(okHeader(10, 1), 'M'), 0, 10, "M", ""},
		{"ok at the end", okHeader(10, 0), 10, 10, "", ""},
		{"refusal", refusal(StatusNotFound, 4, "gone"), 0, 0, "", "gone"},
		{"negative size", okHeader(-1, 0), 0, 0, "", "announces -1 bytes"},
		{"size below the offset", okHeader(5, 0), 6, 0, "", "announces 5 bytes for a read at offset 6"},
		{"huge size", okHeader(math.MaxInt64, 0), 0, 0, "", "announces 9223372036854775807 bytes"},
		{"huge metadata", okHeader(1, math.MaxUint32), 0, 0, "", "4294967295 bytes of metadata"},
		{"huge refusal", refusal(StatusBadRange, math.MaxUint32, "x"), 0, 0, "", "message of 4294967295 bytes"},
		{"truncated header", okHeader(1, 0)[:7], 0, 0, "", "unexpected EOF"},
		{"truncated metadata", okHeader(1, 5), 0, 0, "", "EOF"},
		{"truncated refusal", refusal(StatusBadRange, 10, "abc"), 0, 0, "", "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			size, meta, err := ReadResponse(bufio.NewReader(bytes.NewReader(tt.in)), tt.off)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("readResponse = %d, %q, %v; want an error saying %q", size, meta, err, tt.err)
				}
				return
			}
			if err != nil || size != tt.size || string(meta) != tt.meta {
				t.Fatalf("readResponse = %d, %q, %v; want %d, %q", size, meta, err, tt.size, tt.meta)
			}
		})
	}
}
