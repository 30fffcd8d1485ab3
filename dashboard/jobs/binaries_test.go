package jobs

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goray-dev/goray/internal/leaktest"
)

// fillUploads starts MaxUploads uploads into b that read one byte and then
// wait; the returned function ends them (with an error: nothing stored)
// and waits for them.
func fillUploads(t *testing.T, b *Binaries) func() {
	t.Helper()
	var pipes []*io.PipeWriter
	errs := make(chan error, MaxUploads)
	for i := range MaxUploads {
		pr, pw := io.Pipe()
		pipes = append(pipes, pw)
		sha := shaOf([]byte{byte(i)})
		go func() {
			_, _, err := b.Put(sha, pr)
			errs <- err
		}()
		// Once its first byte is read, the upload is in progress.
		if _, err := pw.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	return func() {
		for _, pw := range pipes {
			pw.CloseWithError(errors.New("client gone"))
		}
		for range pipes {
			if err := <-errs; err == nil || !strings.Contains(err.Error(), "client gone") {
				t.Errorf("ended upload: %v", err)
			}
		}
	}
}

func TestBinariesBoundConcurrentUploads(t *testing.T) {
	leaktest.Goroutines(t)
	b, err := NewBinaries(filepath.Join(t.TempDir(), "bin"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	kept := []byte("kept")
	if _, _, err := b.Put(shaOf(kept), bytes.NewReader(kept)); err != nil {
		t.Fatal(err)
	}
	end := fillUploads(t, b)
	one := []byte("one more")
	r := bytes.NewReader(one)
	if _, _, err := b.Put(shaOf(one), r); !errors.Is(err, ErrTooManyUploads) || r.Len() != len(one) {
		t.Errorf("upload beyond %d in progress: %v, %d bytes read; want ErrTooManyUploads, nothing read", MaxUploads, err, len(one)-r.Len())
	}
	// A binary the head has needs no upload, so no slot.
	if _, uploaded, err := b.Put(shaOf(kept), bytes.NewReader(kept)); err != nil || uploaded {
		t.Errorf("Put of a stored binary with every slot taken: %v, uploaded %v", err, uploaded)
	}
	end()
	if _, uploaded, err := b.Put(shaOf(one), bytes.NewReader(one)); err != nil || !uploaded {
		t.Errorf("upload once the others ended: %v, uploaded %v", err, uploaded)
	}
}

func TestAPIRefusesUploadsBeyondTheBound(t *testing.T) {
	leaktest.Goroutines(t)
	a := newAPI(t, 0)
	end := fillUploads(t, a.bins)
	defer end()
	body := []byte("#!/bin/sh\nexit 0\n")
	req, err := http.NewRequest("PUT", a.base+"/api/binaries/"+shaOf(body), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := a.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(msg), "as many as it takes at once (4)") {
		t.Errorf("upload beyond the bound: %d, Retry-After %q, %s; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), msg)
	}
}
