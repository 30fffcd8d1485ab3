package ui

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/goray-dev/goray/state"
)

//go:embed assets
var assets embed.FS

// staticFS is what /static/ serves: the CSS and the script.
func staticFS() fs.FS {
	sub, err := fs.Sub(assets, "assets/static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}

var templates = template.Must(template.New("").Funcs(template.FuncMap{
	"short": short,
	"clock": clock,
	"bytes": func(n int64) string { return humanize.IBytes(uint64(max(n, 0))) },
	"pct": func(used, total float64) string {
		if total <= 0 {
			return "0"
		}
		return fmt.Sprintf("%.1f", min(max(used/total*100, 0), 100))
	},
	"f64":   func(n int64) float64 { return float64(n) },
	"num":   func(f float64) string { return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", f), "0"), ".") },
	"lower": strings.ToLower,
	"join":  strings.Join,
}).ParseFS(assets, "assets/*.html"))

// Sections are the page's sections, in order; /ui/part/{section} serves
// each.
var Sections = []string{"nodes", "jobs", "actors", "tasks", "timeline", "placement-groups", "plugins"}

// sectionData is what a section's template gets.
type sectionData struct {
	// Err says why the section could not be filled.
	Err string
	listAnswer
	// Query is the tasks' filters as a query string, for links.
	Query string
	// Summary counts the tasks (tasks section).
	Summary *state.Summary
	// Timeline is the drawn trace (timeline section).
	Timeline *timelineView
}

// section gathers one section's data.
func (u *UI) section(ctx context.Context, name string, v url.Values) sectionData {
	d := sectionData{Query: v.Encode()}
	var err error
	switch name {
	case "tasks":
		var q query
		if q, err = parseQuery(v, state.DefaultLimit); err == nil {
			d.listAnswer, err = u.list(ctx, "tasks", q)
		}
		if err == nil {
			var s state.Summary
			if s, err = u.summary(ctx, url.Values{}); err == nil {
				d.Summary = &s
			}
		}
	case "timeline":
		var t state.Trace
		if t, err = u.trace(ctx, v, TimelineTasks); err == nil {
			d.Timeline = drawTimeline(t)
		}
	default:
		if !slices.Contains(Sections, name) {
			err = fmt.Errorf("%w %q: want one of %s", errUnknownKind, name, strings.Join(Sections, ", "))
			break
		}
		d.listAnswer, err = u.list(ctx, name, query{limit: 0})
	}
	if err != nil {
		d.Err = err.Error()
	}
	return d
}

// taskParams keeps the query parameters the tasks and timeline sections
// take.
func taskParams(v url.Values) url.Values {
	out := url.Values{}
	for k, vals := range v {
		if len(vals) > 0 && vals[0] != "" {
			out[k] = vals
		}
	}
	return out
}

// pageData fills page.html.
type pageData struct {
	Sections map[string]sectionData
	// Filters are the tasks' filters, for the form.
	Filters         map[string]string
	RefreshMs       int64
	TimelineTasks   int
	FilterKeys      []string
	TimelineHasData bool
}

// page renders the whole page.
func (u *UI) page(w http.ResponseWriter, r *http.Request) {
	v := taskParams(r.URL.Query())
	d := pageData{Sections: map[string]sectionData{}, Filters: map[string]string{}, RefreshMs: RefreshInterval.Milliseconds(),
		TimelineTasks: TimelineTasks, FilterKeys: []string{"state", "function", "job_id", "node_id"}}
	for k := range v {
		d.Filters[k] = v.Get(k)
	}
	for _, s := range Sections {
		p := url.Values{}
		if s == "tasks" || s == "timeline" {
			p = v
		}
		d.Sections[s] = u.section(r.Context(), s, p)
	}
	u.render(w, http.StatusOK, "page.html", d)
}

// part renders one section's fragment, for the page's refresh.
func (u *UI) part(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("section")
	if !slices.Contains(Sections, name) {
		http.Error(w, fmt.Sprintf("GET /ui/part/%s: no such section; want one of %s", name, strings.Join(Sections, ", ")), http.StatusNotFound)
		return
	}
	d := u.section(r.Context(), name, taskParams(r.URL.Query()))
	u.render(w, http.StatusOK, "section-"+name, d)
}

// render executes a template into a buffer first, so a template error is
// a clean 500 rather than half a page.
func (u *UI) render(w http.ResponseWriter, code int, name string, data any) {
	var buf bytes.Buffer
	if err := templates.ExecuteTemplate(&buf, name, data); err != nil {
		u.log.Error("rendering the dashboard", "template", name, "error", err)
		http.Error(w, "rendering "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}
