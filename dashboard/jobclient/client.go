// Package jobclient is the client of the head's job API (dashboard/jobs):
// what `goray job` and the tests call. It uploads a job's binary only when
// the head lacks it (HEAD, then PUT by sha256), submits, lists, follows
// logs, stops and deletes jobs, with the cluster token on every request.
package jobclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/dashboard/jobs"
	"github.com/goray-dev/goray/internal/auth"
)

// Limits on what the client reads from the head.
const (
	maxJSONAnswer  = 64 << 20
	maxErrorAnswer = 64 << 10
)

// APIError is an answer of the head other than success.
type APIError struct {
	// Method and URL are the request's; Status its HTTP status code.
	Method, URL string
	Status      int
	// Message is the head's explanation.
	Message string
}

// Error says which request failed and why.
func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.URL, e.Status, http.StatusText(e.Status), e.Message)
}

// NotFound reports whether the head answered 404.
func (e *APIError) NotFound() bool { return e.Status == http.StatusNotFound }

// Client calls one head's job API.
type Client struct {
	base  string
	hc    *http.Client
	creds *auth.Credentials
}

// BaseURL turns an address ("host:port", "http://host:port" or
// "https://host:port") into the API's base URL; an address without a
// scheme gets https when tls is set.
func BaseURL(addr string, tls bool) (string, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return "", errors.New("empty dashboard address")
	}
	if !strings.Contains(addr, "://") {
		scheme := "http://"
		if tls {
			scheme = "https://"
		}
		addr = scheme + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "", fmt.Errorf("dashboard address %q: %w", addr, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("dashboard address %q: want http:// or https://", addr)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("dashboard address %q: want scheme://host:port", addr)
	}
	return u.Scheme + "://" + u.Host, nil
}

// New returns a client of the head at addr (see BaseURL) that presents
// creds.
func New(addr string, creds *auth.Credentials) (*Client, error) {
	base, err := BaseURL(addr, creds.TLS())
	if err != nil {
		return nil, err
	}
	hc := &http.Client{}
	if t := creds.HTTPTransport(); t != nil {
		hc.Transport = t
	}
	return &Client{base: base, hc: hc, creds: creds}, nil
}

// URL is the head's base URL.
func (c *Client) URL() string { return c.base }

// do sends a request and returns the answer when it is a success; any
// other answer is an *APIError.
func (c *Client) do(ctx context.Context, method, path string, body io.Reader, size int64, ctype string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if size >= 0 && body != nil {
		req.ContentLength = size
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	c.creds.SetHTTPAuth(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w (is the head's dashboard running there? `goray start --head` prints its address)", method, c.base+path, err)
	}
	if resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorAnswer))
	msg := strings.TrimSpace(string(b))
	var eb dashboard.ErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error != "" {
		msg = eb.Error
	}
	if msg == "" {
		msg = "(no message)"
	}
	return nil, &APIError{Method: method, URL: c.base + path, Status: resp.StatusCode, Message: msg}
}

// doJSON sends in (when not nil) as JSON and decodes the answer into out.
func (c *Client) doJSON(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	size := int64(-1)
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, size, ctype = bytes.NewReader(b), int64(len(b)), "application/json"
	}
	resp, err := c.do(ctx, method, path, body, size, ctype)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONAnswer)).Decode(out); err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, c.base+path, err)
	}
	return nil
}

// HasBinary reports whether the head has the binary sha.
func (c *Client) HasBinary(ctx context.Context, sha string) (bool, error) {
	resp, err := c.do(ctx, http.MethodHead, "/api/binaries/"+sha, nil, -1, "")
	var ae *APIError
	if errors.As(err, &ae) && ae.NotFound() {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return true, nil
}

// PutBinary uploads size bytes from r as the binary sha.
func (c *Client) PutBinary(ctx context.Context, sha string, r io.Reader, size int64) (jobs.BinaryResponse, error) {
	var out jobs.BinaryResponse
	resp, err := c.do(ctx, http.MethodPut, "/api/binaries/"+sha, r, size, "application/octet-stream")
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(io.LimitReader(resp.Body, maxJSONAnswer)).Decode(&out)
	return out, err
}

// BinaryStats returns what the head's binary store received since it
// started.
func (c *Client) BinaryStats(ctx context.Context) (jobs.StatsResponse, error) {
	var out jobs.StatsResponse
	err := c.doJSON(ctx, http.MethodGet, "/api/binaries/", nil, &out)
	return out, err
}

// uploadRetryTime bounds how long EnsureBinary retries an upload the
// head refuses for being busy (503: too many uploads at once).
const uploadRetryTime = 2 * time.Minute

// Upload is what EnsureBinary did.
type Upload struct {
	// SHA256 and Size are the file's.
	SHA256 string
	Size   int64
	// Uploaded is false when the head had the binary already.
	Uploaded bool
}

// EnsureBinary makes sure the head has the file at path: it hashes the
// file, asks the head, and uploads it only when the head lacks it. wrap,
// when not nil, wraps the upload's reader (a progress bar) given its size.
func (c *Client) EnsureBinary(ctx context.Context, path string, wrap func(r io.Reader, size int64) io.Reader) (Upload, error) {
	f, err := os.Open(path)
	if err != nil {
		return Upload{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Upload{}, err
	}
	if !st.Mode().IsRegular() {
		return Upload{}, fmt.Errorf("%s is not a regular file", path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return Upload{}, fmt.Errorf("hashing %s: %w", path, err)
	}
	up := Upload{SHA256: hex.EncodeToString(h.Sum(nil)), Size: st.Size()}
	has, err := c.HasBinary(ctx, up.SHA256)
	if err != nil || has {
		return up, err
	}
	// A head busy with other uploads answers 503: try again with backoff
	// (bounded by uploadRetryTime and ctx); any other error is final.
	b := backoff.NewExponentialBackOff()
	b.MaxInterval = 5 * time.Second
	rep, err := backoff.Retry(ctx, func() (jobs.BinaryResponse, error) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return jobs.BinaryResponse{}, backoff.Permanent(err)
		}
		var r io.Reader = struct{ io.Reader }{f} // not an io.Closer: the transport would close f
		if wrap != nil {
			r = wrap(r, up.Size)
		}
		rep, err := c.PutBinary(ctx, up.SHA256, r, up.Size)
		var ae *APIError
		if err != nil && !(errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable) {
			return rep, backoff.Permanent(err)
		}
		return rep, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(uploadRetryTime))
	if err != nil {
		return up, fmt.Errorf("uploading %s: %w", path, err)
	}
	up.Uploaded = rep.Uploaded
	return up, nil
}

// Submit submits a job and returns its submission id.
func (c *Client) Submit(ctx context.Context, req jobs.SubmitRequest) (string, error) {
	var out jobs.SubmitResponse
	err := c.doJSON(ctx, http.MethodPost, "/api/jobs/", req, &out)
	return out.SubmissionID, err
}

// Get returns a job.
func (c *Client) Get(ctx context.Context, id string) (jobs.Job, error) {
	var out jobs.Job
	err := c.doJSON(ctx, http.MethodGet, "/api/jobs/"+url.PathEscape(id), nil, &out)
	return out, err
}

// List returns every job the head keeps.
func (c *Client) List(ctx context.Context) ([]jobs.Job, error) {
	var out jobs.ListResponse
	err := c.doJSON(ctx, http.MethodGet, "/api/jobs/", nil, &out)
	return out.Jobs, err
}

// Stop asks the head to stop a job; false when it had finished.
func (c *Client) Stop(ctx context.Context, id string) (bool, error) {
	var out jobs.StopResponse
	err := c.doJSON(ctx, http.MethodPost, "/api/jobs/"+url.PathEscape(id)+"/stop", nil, &out)
	return out.Stopped, err
}

// Delete removes a finished job, its log and working directory.
func (c *Client) Delete(ctx context.Context, id string) error {
	var out jobs.DeleteResponse
	return c.doJSON(ctx, http.MethodDelete, "/api/jobs/"+url.PathEscape(id), nil, &out)
}

// Logs copies the job's log to w; with follow it goes on until the job
// finished and all its log was copied (or ctx ends).
func (c *Client) Logs(ctx context.Context, id string, follow bool, w io.Writer) error {
	path := "/api/jobs/" + url.PathEscape(id) + "/logs"
	if follow {
		path += "?follow=1"
	}
	resp, err := c.do(ctx, http.MethodGet, path, nil, -1, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("reading the log of job %s: %w", id, err)
	}
	return nil
}
