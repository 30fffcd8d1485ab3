// Package ui is the dashboard's web page and the state JSON behind it,
// served by the head's HTTP server (package dashboard) next to the job
// API.
//
// The page is rendered on the server with html/template from templates
// and assets embedded in the goray binary (embed.FS): one page with the
// cluster overview, jobs, actors, tasks (state counts, a filtered table
// and a timeline drawn as SVG from the Chrome trace of package state),
// placement groups and plugins. A small script (assets/app.js) replaces
// each section every RefreshInterval with its fragment from
// /ui/part/{section}. No Node toolchain, no CDN: see docs/dashboard.md.
//
// Routes (all behind the cluster token but the login page and the static
// assets, mounted with HandlePublic):
//
//	GET  /                        the page (a browser without the token is sent to /login)
//	GET  /ui/part/{section}       one section's HTML fragment
//	GET  /api/state/{kind}        nodes, jobs, actors, tasks, placement-groups, plugins as JSON
//	GET  /api/state/summary/tasks task counts by function and state
//	GET  /api/state/timeline      the tasks' Chrome trace (Perfetto opens it)
//	GET  /logs/{node}/{file}      a node's log file (?tail=N lines)
//	GET  /login, POST /login, POST /logout
//	GET  /static/                 CSS and JS
//
// List routes take filters as query parameters (?state=RUNNING&job_id=...,
// a row's JSON field names, as `goray list --filter`) and limit (0: all;
// default state.DefaultLimit); a bad parameter is a 400 naming it.
package ui

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/dashboard/jobs"
	"github.com/goray-dev/goray/internal/auth"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/state"
	"github.com/hashicorp/go-hclog"
)

// RefreshInterval is how often the page refreshes its sections.
const RefreshInterval = 2 * time.Second

// MaxLimit bounds the limit query parameter.
const MaxLimit = 10000

// queryTimeout bounds the GCS and raylet queries of one request.
const queryTimeout = 15 * time.Second

// Source is what the dashboard asks of the cluster: the state package's
// Source and the GCS's tables (a *state.GCSSource).
type Source interface {
	state.Source
	Jobs(ctx context.Context) ([]*pb.JobInfo, error)
	Actors(ctx context.Context) ([]*pb.ActorInfo, error)
	PlacementGroups(ctx context.Context) ([]*pb.PlacementGroupInfo, error)
}

// JobLister lists the submitted jobs (a *jobs.Supervisor).
type JobLister interface {
	List() []jobs.Job
}

// Options configures Register.
type Options struct {
	// Source is the cluster.
	Source Source
	// Jobs lists the submitted jobs (nil: none).
	Jobs JobLister
	// Auth is the cluster's credentials: the login page checks the token
	// with them, and the log route dials raylets with them.
	Auth *auth.Credentials
	// Logger receives the handlers' logs (nil discards them).
	Logger hclog.Logger
}

// Mux is where the routes mount: a *dashboard.Server.
type Mux interface {
	Handle(pattern string, h http.Handler)
	HandlePublic(pattern string, h http.Handler)
}

// UI serves the page and the state API.
type UI struct {
	o   Options
	log hclog.Logger
	// refusals logs wrong logins once per peer per minute.
	refusals auth.RefusalLog
}

// Register mounts the page, the state API and the login on m.
func Register(m Mux, o Options) *UI {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	u := &UI{o: o, log: o.Logger}
	m.HandlePublic("GET /{$}", u.requireLogin(http.HandlerFunc(u.page)))
	m.HandlePublic("GET /login", http.HandlerFunc(u.loginPage))
	m.HandlePublic("POST /login", http.HandlerFunc(u.login))
	m.HandlePublic("POST /logout", http.HandlerFunc(u.logout))
	m.HandlePublic("GET /static/", http.StripPrefix("/static/", http.FileServerFS(staticFS())))
	m.Handle("GET /ui/part/{section}", http.HandlerFunc(u.part))
	m.Handle("GET /api/state/{kind}", http.HandlerFunc(u.stateJSON))
	m.Handle("GET /api/state/summary/tasks", http.HandlerFunc(u.summaryJSON))
	m.Handle("GET /logs/{node}/{file}", http.HandlerFunc(u.logFile))
	return u
}

// ParamError says a query parameter is wrong.
type ParamError struct {
	Param  string
	Value  string
	Reason string
}

func (e *ParamError) Error() string {
	return fmt.Sprintf("query parameter %s=%q: %s", e.Param, e.Value, e.Reason)
}

// query is a list request's parameters.
type query struct {
	filters []state.Filter
	limit   int
	job     string
}

// parseQuery reads limit and the filters; extra names parameters that are
// neither (they are returned in job when named "job").
func parseQuery(v url.Values, defLimit int, extra ...string) (query, error) {
	q := query{limit: defLimit}
	for _, k := range slices.Sorted(maps.Keys(v)) {
		vals := v[k]
		if len(vals) != 1 {
			return q, &ParamError{Param: k, Value: fmt.Sprint(vals), Reason: "give it once"}
		}
		val := vals[0]
		switch {
		case k == "limit":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 || n > MaxLimit {
				return q, &ParamError{Param: k, Value: val, Reason: fmt.Sprintf("want a whole number from 0 (all) to %d", MaxLimit)}
			}
			q.limit = n
		case slices.Contains(extra, k):
			if k == "job" {
				q.job = val
			}
		default:
			q.filters = append(q.filters, state.Filter{Key: k, Value: val})
		}
	}
	return q, nil
}

// listAnswer is the JSON of a list.
type listAnswer struct {
	Rows      any      `json:"rows"`
	Total     int      `json:"total"`
	Truncated bool     `json:"truncated"`
	Warnings  []string `json:"warnings"`
}

// statusOf maps an error to an HTTP status: a bad parameter or filter
// is the caller's, anything else the cluster's.
func statusOf(err error) int {
	var pe *ParamError
	var fe *state.FilterError
	if errors.As(err, &pe) || errors.As(err, &fe) {
		return http.StatusBadRequest
	}
	if errors.Is(err, errUnknownKind) {
		return http.StatusNotFound
	}
	return http.StatusBadGateway
}

var errUnknownKind = errors.New("unknown kind")

func (u *UI) stateJSON(w http.ResponseWriter, r *http.Request) {
	kind := r.PathValue("kind")
	if kind == "timeline" {
		u.timelineJSON(w, r)
		return
	}
	q, err := parseQuery(r.URL.Query(), state.DefaultLimit)
	if err == nil {
		var a listAnswer
		a, err = u.list(r.Context(), kind, q)
		if err == nil {
			dashboard.WriteJSON(w, http.StatusOK, a)
			return
		}
	}
	dashboard.WriteError(w, statusOf(err), "GET /api/state/%s: %v", kind, err)
}

// Kinds are the lists /api/state/{kind} serves.
var Kinds = []string{"nodes", "jobs", "actors", "tasks", "placement-groups", "plugins"}

func pageOf[T any](rows []T, q query) (listAnswer, error) {
	p, err := state.Apply(rows, q.filters, q.limit)
	if err != nil {
		return listAnswer{}, err
	}
	return listAnswer{Rows: p.Rows, Total: p.Total, Truncated: p.Truncated, Warnings: []string{}}, nil
}

// list answers one kind of list.
func (u *UI) list(ctx context.Context, kind string, q query) (listAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	src := u.o.Source
	switch kind {
	case "nodes":
		if err := state.CheckFilters[NodeRow](q.filters); err != nil {
			return listAnswer{}, err
		}
		vs, err := src.Nodes(ctx)
		if err != nil {
			return listAnswer{}, err
		}
		return pageOf(nodeRows(vs), q)
	case "jobs":
		if err := state.CheckFilters[JobRow](q.filters); err != nil {
			return listAnswer{}, err
		}
		js, err := src.Jobs(ctx)
		if err != nil {
			return listAnswer{}, err
		}
		var subs []jobs.Job
		if u.o.Jobs != nil {
			subs = u.o.Jobs.List()
		}
		return pageOf(jobRows(subs, js), q)
	case "actors":
		if err := state.CheckFilters[ActorRow](q.filters); err != nil {
			return listAnswer{}, err
		}
		as, err := src.Actors(ctx)
		if err != nil {
			return listAnswer{}, err
		}
		return pageOf(actorRows(as), q)
	case "placement-groups":
		if err := state.CheckFilters[PlacementGroupRow](q.filters); err != nil {
			return listAnswer{}, err
		}
		gs, err := src.PlacementGroups(ctx)
		if err != nil {
			return listAnswer{}, err
		}
		return pageOf(placementGroupRows(gs), q)
	case "plugins":
		if err := state.CheckFilters[PluginRow](q.filters); err != nil {
			return listAnswer{}, err
		}
		var warnings []string
		d, err := state.GatherNodes(ctx, src, false, func(s string) { warnings = append(warnings, s) })
		if err != nil {
			return listAnswer{}, err
		}
		rows := []PluginRow{}
		for _, n := range d.Nodes {
			id := hexID(n.GetNodeId())
			for _, p := range d.Stats[id].GetPlugins() {
				rows = append(rows, PluginRow{NodeID: id, Kind: p.GetKind(), Name: p.GetName(), Version: p.GetVersion(), State: p.GetState(),
					Restarts: p.GetRestarts(), Pid: p.GetPid(), LastError: p.GetLastError()})
			}
		}
		a, err := pageOf(rows, q)
		if err == nil && warnings != nil {
			a.Warnings = warnings
		}
		return a, err
	case "tasks":
		tp, err := state.Tasks(ctx, src, q.filters, q.limit)
		if err != nil {
			return listAnswer{}, err
		}
		a := listAnswer{Rows: tp.Rows, Total: tp.Total, Truncated: tp.Truncated, Warnings: []string{}}
		if tp.Evicted > 0 {
			a.Warnings = append(a.Warnings, fmt.Sprintf("the GCS evicted %d finished tasks to stay within its bound", tp.Evicted))
		}
		for _, job := range slices.Sorted(maps.Keys(tp.DroppedEvents)) {
			a.Warnings = append(a.Warnings, fmt.Sprintf("processes of job %s dropped %d task events; states may be behind", short(job), tp.DroppedEvents[job]))
		}
		return a, nil
	}
	return listAnswer{}, fmt.Errorf("%w %q: want one of %v, summary/tasks or timeline", errUnknownKind, kind, Kinds)
}

// summaryJSON answers GET /api/state/summary/tasks: the counts of the
// tasks matching the filters, by function and state.
func (u *UI) summaryJSON(w http.ResponseWriter, r *http.Request) {
	s, err := u.summary(r.Context(), r.URL.Query())
	if err != nil {
		dashboard.WriteError(w, statusOf(err), "GET /api/state/summary/tasks: %v", err)
		return
	}
	dashboard.WriteJSON(w, http.StatusOK, s)
}

func (u *UI) summary(ctx context.Context, v url.Values) (state.Summary, error) {
	q, err := parseQuery(v, 0)
	if err != nil {
		return state.Summary{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	tp, err := state.Tasks(ctx, u.o.Source, q.filters, q.limit)
	if err != nil {
		return state.Summary{}, err
	}
	return state.SummarizeTasks(tp.Rows), nil
}

// timelineJSON answers GET /api/state/timeline (?job=ID, filters, limit;
// default all the tasks the GCS keeps): the Chrome trace `goray timeline`
// writes.
func (u *UI) timelineJSON(w http.ResponseWriter, r *http.Request) {
	t, err := u.trace(r.Context(), r.URL.Query(), 0)
	if err != nil {
		dashboard.WriteError(w, statusOf(err), "GET /api/state/timeline: %v", err)
		return
	}
	dashboard.WriteJSON(w, http.StatusOK, t)
}

// trace builds the timeline of the tasks matching v.
func (u *UI) trace(ctx context.Context, v url.Values, defLimit int) (state.Trace, error) {
	q, err := parseQuery(v, defLimit, "job")
	if err != nil {
		return state.Trace{}, err
	}
	if q.job != "" {
		q.filters = append(q.filters, state.Filter{Key: "job_id", Value: q.job})
	}
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	tp, err := state.Tasks(ctx, u.o.Source, q.filters, q.limit)
	if err != nil {
		return state.Trace{}, err
	}
	names := map[string]string{}
	if vs, err := u.o.Source.Nodes(ctx); err == nil {
		for _, v := range vs {
			names[hexID(v.GetInfo().GetNodeId())] = v.GetInfo().GetNodeName()
		}
	}
	return state.Timeline(tp.Rows, names), nil
}
