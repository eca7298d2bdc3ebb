package axhttp

import (
	"bytes"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// The dashboard: server-rendered pages (html/template escapes every
// value), assets embedded in the binary, no build step. Changes are POSTs
// with a CSRF token (see session.go), answered with a redirect to the
// page they came from.

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pageNames lists the dashboard's pages, one template each.
var pageNames = []string{"overview", "jobs", "job", "dead", "kinds", "periodic", "nodes", "login", "error", "find"}

// pages holds the parsed templates and the static assets.
type pages struct {
	tmpl   map[string]*template.Template
	static map[string]staticFile
}

type staticFile struct {
	body        []byte
	contentType string
}

var templateFuncs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return humanDuration(time.Since(t))
	},
	"dur":     humanDuration,
	"rel":     relTime,
	"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"int64":   func(n int) int64 { return int64(n) },
	"groupTable": func(p pageData, groups []*deadGroup, more int, id, none string) groupTable {
		return groupTable{Page: p, Groups: groups, More: more, ID: id, None: none}
	},
	"deadWindows": func() any { return deadWindows },
	"priority":    func(p int) string { return ax.PriorityLevel(p).String() },
	"cutLink": func(base string, id uuid.UUID, part string, cut bool, size int) cutLink {
		unit := "bytes"
		if part == "metadata" {
			unit = "entries"
		}
		return cutLink{Cut: cut, Part: part, Size: fmt.Sprintf("%d %s", size, unit), Href: base + "/jobs/" + id.String() + "/raw/" + part}
	},
	"count": func(m map[ax.State]int64, st ax.State) int64 {
		return m[st]
	},
	"short":            func(id uuid.UUID) string { return id.String()[:8] + "…" + id.String()[30:] },
	"pathEscape":       url.PathEscape,
	"partitionBreaker": func(p ax.PartitionBreakerState) string { return PartitionBreakerSummary(&p) },
	"set":              func(id uuid.UUID) bool { return id != uuid.Nil },
	"lastError": func(j *store.JobRecord) string {
		if len(j.Errors) == 0 {
			return ""
		}
		return j.Errors[len(j.Errors)-1].Error
	},
}

// loadPages parses the templates and indexes the static files.
func loadPages() (*pages, error) {
	p := &pages{tmpl: map[string]*template.Template{}, static: map[string]staticFile{}}
	for _, name := range pageNames {
		files := []string{"templates/layout.html", "templates/" + name + ".html"}
		if name == "find" {
			// The job list's table ("jobtable"); find.html, parsed last,
			// defines the page's content.
			files = []string{"templates/layout.html", "templates/jobs.html", "templates/find.html"}
		}
		t, err := template.New(name).Funcs(templateFuncs).ParseFS(templateFS, files...)
		if err != nil {
			return nil, fmt.Errorf("axhttp: template %s: %w", name, err)
		}
		p.tmpl[name] = t
	}
	err := fs.WalkDir(staticFS, "static", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := staticFS.ReadFile(name)
		if err != nil {
			return err
		}
		ct := mime.TypeByExtension(path.Ext(name))
		if ct == "" {
			ct = "application/octet-stream"
		}
		p.static[strings.TrimPrefix(name, "static/")] = staticFile{body: b, contentType: ct}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("axhttp: static files: %w", err)
	}
	return p, nil
}

// humanDuration prints d coarsely: 3s, 4m10s, 2h5m, 3d4h.
func humanDuration(d time.Duration) string {
	if d < 0 {
		return "in " + humanDuration(-d)
	}
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// relTime says how far t is from now, the way a person would: "just
// now", "3 min ago", "in 2 h", "5 d ago". Pages show it beside the
// absolute time, and app.js keeps it current.
func relTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Since(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < 10*time.Second:
		return "just now"
	case d < time.Minute:
		s = fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%d h", int(d.Hours()))
	default:
		s = fmt.Sprintf("%d d", int(d.Hours())/24)
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// groupTable is what the "groups" template of the dead letters page
// gets: one section's groups and the page.
type groupTable struct {
	Page   pageData
	Groups []*deadGroup
	More   int
	ID     string
	None   string
}

// cutLink is what the "cut" template says of a value cut short.
type cutLink struct {
	Cut              bool
	Part, Size, Href string
}

// pageData is what every page template gets.
type pageData struct {
	Base      string
	Title     string
	Nav       string
	Identity  Identity
	ReadOnly  bool
	Login     bool // the dashboard has logins (Config.Auth)
	LoggedIn  bool
	CSRF      string
	Flash     string
	Error     string
	Now       time.Time
	RequestID string
	Body      any
	// Refresh is the page's refresh interval in milliseconds (0: none).
	Refresh int64
}

// render writes a page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name, title string, body any) {
	st := stateFrom(r.Context())
	d := pageData{
		Base: basePath(r), Title: title, Nav: name, Identity: st.identity, ReadOnly: h.readOnly(r),
		Login: h.cfg.Auth != nil, LoggedIn: st.loggedIn && h.cfg.Auth != nil, CSRF: h.sessions.csrfToken(st.binding),
		Now: h.cfg.Clock(), RequestID: RequestID(r.Context()), Body: body,
	}
	if d.LoggedIn || h.cfg.Auth == nil {
		if name != "login" && name != "error" {
			d.Refresh = h.cfg.RefreshInterval.Milliseconds()
		}
	}
	if c, err := r.Cookie(flashCookie); err == nil {
		if b, err := base64.RawURLEncoding.DecodeString(c.Value); err == nil && len(b) <= 300 {
			d.Flash = string(b)
		}
		http.SetCookie(w, h.sessions.cookie(r, flashCookie, "", -1))
	}
	if e, ok := body.(interface{ pageError() string }); ok {
		d.Error = e.pageError()
	}
	var buf bytes.Buffer
	if err := h.pages.tmpl[name].ExecuteTemplate(&buf, "layout", d); err != nil {
		logFrom(r.Context()).Error("render page", zap.String("page", name), zap.Error(err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	securityHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// securityHeaders forbids what the pages never need: scripts and styles
// from elsewhere or inline, framing, form targets elsewhere.
func securityHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Cache-Control", "no-store")
}

type errorPage struct {
	Status  int
	Message string
}

// dashError renders the error page.
func (h *Handler) dashError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error", http.StatusText(status), errorPage{Status: status, Message: msg})
}

// dashProblem renders the error page of err.
func (h *Handler) dashProblem(w http.ResponseWriter, r *http.Request, err error) {
	p := problemFor(r, err)
	h.dashError(w, r, p.Status, p.Detail)
}

// dashboardMux routes the dashboard's pages, forms and assets.
func (h *Handler) dashboardMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.overviewPage)
	mux.HandleFunc("GET /jobs", h.jobsPage)
	mux.HandleFunc("GET /jobs/{id}", h.jobPage)
	mux.HandleFunc("GET /find", h.findPage)
	mux.HandleFunc("GET /jobs/{id}/raw/{part}", h.rawPart)
	mux.HandleFunc("POST /jobs/{id}/retry", h.mutate(h.postJob(opRetry)))
	mux.HandleFunc("POST /jobs/{id}/cancel", h.mutate(h.postJob(opCancel)))
	mux.HandleFunc("GET /dead", h.deadPage)
	mux.HandleFunc("POST /dead/retry", h.mutate(h.postDeadRetry))
	mux.HandleFunc("POST /dead/group/retry", h.mutate(h.postDeadGroup(false)))
	mux.HandleFunc("POST /dead/group/discard", h.mutate(h.postDeadGroup(true)))
	mux.HandleFunc("GET /kinds", h.kindsPage)
	mux.HandleFunc("POST /kinds/{kind}/pause", h.mutate(h.postKind(true)))
	mux.HandleFunc("POST /kinds/{kind}/resume", h.mutate(h.postKind(false)))
	mux.HandleFunc("POST /kinds/{kind}/breaker/open", h.mutate(h.postBreaker(true)))
	mux.HandleFunc("POST /kinds/{kind}/breaker/close", h.mutate(h.postBreaker(false)))
	mux.HandleFunc("POST /kinds/{kind}/partitions/open", h.mutate(h.postPartitionBreaker(true)))
	mux.HandleFunc("POST /kinds/{kind}/partitions/close", h.mutate(h.postPartitionBreaker(false)))
	mux.HandleFunc("GET /periodic", h.periodicPage)
	mux.HandleFunc("POST /periodic/{name}/pause", h.mutate(h.postSchedule(opPause)))
	mux.HandleFunc("POST /periodic/{name}/resume", h.mutate(h.postSchedule(opResume)))
	mux.HandleFunc("POST /periodic/{name}/trigger", h.mutate(h.postSchedule(opTrigger)))
	mux.HandleFunc("GET /nodes", h.nodesPage)
	mux.HandleFunc("GET /login", h.loginPage)
	mux.HandleFunc("POST /login", h.postLogin)
	mux.HandleFunc("POST /logout", h.postLogout)
	mux.HandleFunc("GET /static/{file}", h.staticFile)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.dashError(w, r, http.StatusNotFound, "There is no such page.")
	})
	return mux
}

// staticFile serves an embedded asset by its exact name: the name is a
// key of a map built from the embedded files, never a path opened on a
// file system, so no path can reach anything else.
func (h *Handler) staticFile(w http.ResponseWriter, r *http.Request) {
	f, ok := h.pages.static[r.PathValue("file")]
	if !ok {
		h.dashError(w, r, http.StatusNotFound, "There is no such file.")
		return
	}
	w.Header().Set("Content-Type", f.contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_, _ = w.Write(f.body)
}

// mutate wraps a change: a read-only caller gets 403, and so does a form
// without the right CSRF token, before anything changes. fn returns the
// message to flash and the page (below the mount point) to go back to.
func (h *Handler) mutate(fn func(r *http.Request) (flash, back string, err error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				h.dashError(w, r, http.StatusRequestEntityTooLarge, "The form is too large.")
				return
			}
			h.dashError(w, r, http.StatusBadRequest, "The form could not be read.")
			return
		}
		if !h.sessions.checkCSRF(r) {
			logFrom(r.Context()).Info("dashboard change refused: missing or wrong CSRF token")
			h.dashError(w, r, http.StatusForbidden, "The form's security token is missing or wrong: reload the page and try again.")
			return
		}
		if h.readOnly(r) {
			h.dashError(w, r, http.StatusForbidden, "This dashboard is read-only for you.")
			return
		}
		flash, back, err := fn(r)
		if err != nil {
			h.dashProblem(w, r, err)
			return
		}
		h.redirect(w, r, back, flash)
	}
}

// redirect sends the browser to back (a path below the mount point) with
// a message for the next page.
func (h *Handler) redirect(w http.ResponseWriter, r *http.Request, back, flash string) {
	if flash != "" {
		http.SetCookie(w, h.sessions.cookie(r, flashCookie, base64.RawURLEncoding.EncodeToString([]byte(flash)), 60))
	}
	http.Redirect(w, r, basePath(r)+back, http.StatusSeeOther)
}

// kindRow is one kind of the overview.
type kindRow struct {
	ax.KindState
	OldestDue  time.Duration
	HasDue     bool
	Throughput *chart
	Lag        *chart
}

type overviewBody struct {
	Kinds       []kindRow
	States      []ax.State
	Stats       *ax.Stats
	HasActivity bool
	FromStore   bool   // the charts summarize the store's finished jobs
	Range       string // hour or day (store charts)
	ChartError  string
	Problem     string
	MoreKinds   int // kinds not shown (overviewKindsShown)
}

// overviewKindsShown bounds the overview's rows.
const overviewKindsShown = 200

// kindsShown bounds the kinds page's rows, and kindsUnhandledNamed the
// unhandled kinds its alert names.
const (
	kindsShown          = 500
	kindsUnhandledNamed = 20
)

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

func (b overviewBody) pageError() string { return b.Problem }

func (h *Handler) overviewPage(w http.ResponseWriter, r *http.Request) {
	body := overviewBody{States: store.States, Range: "hour"}
	if r.URL.Query().Get("range") == "day" {
		body.Range = "day"
	}
	kinds, err := h.admin.Kinds(r.Context())
	if err != nil {
		body.Problem = problemFor(r, err).Detail
	}
	if st, err := h.statsOf(r); err == nil {
		body.Stats = st
	}
	series, win, fromStore, serr := h.storeActivity(r, body.Range)
	if serr != nil {
		body.ChartError = problemFor(r, serr).Detail
	}
	body.FromStore = fromStore
	body.HasActivity = fromStore || h.cfg.Activity != nil
	seen := map[string]bool{}
	for _, k := range kinds {
		seen[k.Kind] = true
	}
	var extra []string
	switch {
	case fromStore:
		for k := range series {
			extra = append(extra, k)
		}
	case h.cfg.Activity != nil:
		extra = h.cfg.Activity.Kinds()
	}
	for _, k := range extra {
		if !seen[k] {
			seen[k] = true
			kinds = append(kinds, ax.KindState{Kind: k})
		}
	}
	// Trouble first (compareTrouble).
	dueAge := func(k string) time.Duration {
		if body.Stats == nil {
			return 0
		}
		if _, ok := body.Stats.OldestDue[k]; !ok {
			return 0
		}
		return body.Stats.DueAge(k)
	}
	slices.SortFunc(kinds, func(a, b ax.KindState) int {
		return compareTrouble(
			troubleKey{kind: a.Kind, dead: a.Jobs[ax.StateDead], unhandled: a.Unhandled, dueAge: dueAge(a.Kind), paused: a.Paused},
			troubleKey{kind: b.Kind, dead: b.Jobs[ax.StateDead], unhandled: b.Unhandled, dueAge: dueAge(b.Kind), paused: b.Paused})
	})
	if n := len(kinds); n > overviewKindsShown {
		// The page reloads every few seconds: bound it however many
		// kinds there are (the kinds page lists them all).
		kinds, body.MoreKinds = kinds[:overviewKindsShown], n-overviewKindsShown
	}
	for _, k := range kinds {
		row := kindRow{KindState: k}
		if body.Stats != nil {
			if _, ok := body.Stats.OldestDue[k.Kind]; ok {
				row.HasDue, row.OldestDue = true, body.Stats.DueAge(k.Kind)
			}
		}
		switch {
		case fromStore:
			ms := series[k.Kind]
			if ms == nil {
				ms = emptySeries(body.Range, h.cfg.Clock())
			}
			row.Throughput, row.Lag = drawCharts(ms, win)
		case h.cfg.Activity != nil:
			row.Throughput, row.Lag = activityCharts(h.cfg.Activity.Minutes(k.Kind))
		}
		body.Kinds = append(body.Kinds, row)
	}
	h.render(w, r, http.StatusOK, "overview", "Overview", body)
}

// jobsBody is the job list page.
type jobsBody struct {
	Q       url.Values
	States  []ax.State
	Jobs    []*store.JobRecord
	Next    string
	Problem string
	Count   int64
	Counted bool
	Totals  []stateTotal
}

// stateTotal is how many jobs of one state the list's other filters
// select, with the link to them.
type stateTotal struct {
	State ax.State
	Count int64
	Href  string
	Here  bool // the list shows this state
}

func (b jobsBody) pageError() string { return b.Problem }

func (h *Handler) jobsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	body := jobsBody{Q: q, States: store.States}
	opts, err := parseListOptions(q, h.cfg.Clock())
	if err == nil {
		if opts.Limit == 0 {
			opts.Limit = 50
		}
		var list *ax.JobList
		if list, err = h.reader(r).List(r.Context(), opts); err == nil {
			body.Jobs = h.allForCaller(r, list.Jobs)
			if list.Cursor != "" {
				next := url.Values{}
				for k, v := range q {
					next[k] = v
				}
				next.Set("cursor", list.Cursor)
				body.Next = "/jobs?" + next.Encode()
			}
			if n, err := h.admin.Count(r.Context(), opts.Filter); err == nil {
				body.Count, body.Counted = n, true
			}
			body.Totals = h.stateTotals(r, q, opts.Filter)
		}
	}
	status := http.StatusOK
	if err != nil {
		p := problemFor(r, err)
		body.Problem, status = p.Detail, p.Status
	}
	h.render(w, r, status, "jobs", "Jobs", body)
}

// stateTotals counts, per state, the jobs the filter selects whatever
// their state: one count per state (store.States, seven), each as
// bounded as Admin.Count. A count that fails is left out.
func (h *Handler) stateTotals(r *http.Request, q url.Values, f ax.JobFilter) []stateTotal {
	var out []stateTotal
	for _, st := range store.States {
		g := f
		g.States = []ax.State{st}
		n, err := h.admin.Count(r.Context(), g)
		if err != nil {
			continue
		}
		link := url.Values{}
		for k, v := range q {
			if k != "cursor" && k != "state" {
				link[k] = v
			}
		}
		link.Set("state", string(st))
		out = append(out, stateTotal{State: st, Count: n, Href: "/jobs?" + link.Encode(),
			Here: len(f.States) == 1 && f.States[0] == st})
	}
	return out
}

// timelineEntry is one moment of a job's life.
type timelineEntry struct {
	At   time.Time
	What string
}

type jobBody struct {
	Job         *store.JobRecord
	View        jobView
	Timeline    []timelineEntry
	FollowUps   []*store.JobRecord
	FollowUpErr string
	// FollowUpsMore reports that the job's end inserted more jobs than
	// the page shows (FollowUpsShown): the rest are listed by /jobs.
	FollowUpsMore bool
	Callbacks     bool
	CanRetry      bool
	CanCancel     bool
	Future        bool
}

func (h *Handler) jobPage(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	var rec *store.JobRecord
	if err == nil {
		rec, err = h.reader(r).Get(r.Context(), id)
	}
	if err != nil {
		h.dashProblem(w, r, err)
		return
	}
	rec = h.forCaller(r, rec)
	now := h.cfg.Clock()
	body := jobBody{Job: rec, View: viewOf(rec), Future: rec.RunAt.After(now)}
	body.CanRetry = rec.State == ax.StateDead || rec.State == ax.StateCancelled || rec.State == ax.StatePaused ||
		(rec.State == ax.StateScheduled || rec.State == ax.StateRetrying) && body.Future
	body.CanCancel = !rec.State.Final() && !rec.CancelRequested
	for _, f := range rec.FollowUps {
		body.Callbacks = body.Callbacks || f.Job.Kind == CallbackKind
	}
	body.Timeline = append(body.Timeline, timelineEntry{rec.CreatedAt, "scheduled"})
	if !rec.ScheduledAt.IsZero() && !rec.ScheduledAt.Equal(rec.CreatedAt) {
		body.Timeline = append(body.Timeline, timelineEntry{rec.ScheduledAt, "originally due"})
	}
	if n := body.View.EarlierAttempts; n > 0 {
		body.Timeline = append(body.Timeline, timelineEntry{rec.Errors[0].At, fmt.Sprintf("%d earlier attempt(s) failed, from here", n)})
	}
	for _, e := range body.View.Attempts {
		body.Timeline = append(body.Timeline, timelineEntry{e.At, fmt.Sprintf("attempt %d failed", e.Attempt)})
	}
	if !rec.AttemptedAt.IsZero() {
		body.Timeline = append(body.Timeline, timelineEntry{rec.AttemptedAt, fmt.Sprintf("attempt %d started", rec.Attempt)})
	}
	if rec.State.Final() {
		body.Timeline = append(body.Timeline, timelineEntry{rec.FinishedAt, string(rec.State)})
	} else {
		body.Timeline = append(body.Timeline, timelineEntry{rec.RunAt, "due"})
	}
	slices.SortStableFunc(body.Timeline, func(a, b timelineEntry) int { return a.At.Compare(b.At) })
	opts := ax.ListOptions{Order: ax.OldestFirst, Limit: FollowUpsShown, PreviewBytes: ListPreviewBytes}
	if fus, err := h.followUpsOf(r, rec.ID, opts); err == nil {
		body.FollowUps, body.FollowUpsMore = h.allForCaller(r, fus.Jobs), fus.Cursor != ""
	} else if errors.Is(err, errors.ErrUnsupported) {
		body.FollowUpErr = "this store does not keep the jobs a job's end inserts (store.FollowUpStore)"
	} else {
		body.FollowUpErr = problemFor(r, err).Detail
	}
	h.render(w, r, http.StatusOK, "job", "Job "+rec.ID.String(), body)
}

func (h *Handler) postJob(op jobOp) func(r *http.Request) (string, string, error) {
	return func(r *http.Request) (string, string, error) {
		rec, err := h.changeJob(r, op)
		if err != nil {
			return "", "", err
		}
		verb := "Retried"
		if op == opCancel {
			verb = "Cancelled"
		}
		return fmt.Sprintf("%s job %s: now %s.", verb, rec.ID, rec.State), "/jobs/" + rec.ID.String(), nil
	}
}

type deadBody struct {
	Kind    string
	Window  string // the window parameter, as given
	Jobs    []*store.JobRecord
	Count   int64
	Next    string
	Problem string
	*deadSections
}

func (b deadBody) pageError() string { return b.Problem }

// deadWindows are the windows the dead-letter page offers.
var deadWindows = []struct{ Param, Label string }{{"", "ever"}, {"1h", "in the last hour"}, {"24h", "in the last day"}, {"168h", "in the last week"}}

func (h *Handler) deadPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	body := deadBody{Kind: q.Get("kind"), Window: q.Get("window"), deadSections: &deadSections{}}
	var window time.Duration
	var err error
	if body.Window != "" {
		window, err = time.ParseDuration(body.Window)
		if err != nil || window <= 0 || window > maxDeadWindow {
			err = badRequest("window: want a duration such as 1h, up to %s, got %q", maxDeadWindow, body.Window)
		}
	}
	f := ax.JobFilter{States: []ax.State{ax.StateDead}}
	if body.Kind != "" {
		f.Kinds = []string{body.Kind}
	}
	if err == nil {
		var list *ax.JobList
		list, err = h.reader(r).List(r.Context(), ax.ListOptions{Filter: f, Limit: 100, Cursor: q.Get("cursor"), PreviewBytes: ListPreviewBytes})
		if err == nil {
			body.Jobs = h.allForCaller(r, list.Jobs)
			if list.Cursor != "" {
				body.Next = "/dead?" + url.Values{"kind": {body.Kind}, "window": {body.Window}, "cursor": {list.Cursor}}.Encode()
			}
			body.Count, err = h.admin.Count(r.Context(), f)
		}
	}
	if err == nil {
		var secs *deadSections
		if secs, err = h.deadSectionsOf(r, body.Kind, window); err == nil {
			body.deadSections = secs
		}
	}
	status := http.StatusOK
	if err != nil {
		p := problemFor(r, err)
		body.Problem, status = p.Detail, p.Status
	}
	h.render(w, r, status, "dead", "Dead letters", body)
}

// postDeadRetry retries the dead jobs ticked (id), or every dead job
// (of kind, when given) with all=true.
func (h *Handler) postDeadRetry(r *http.Request) (string, string, error) {
	f := ax.JobFilter{States: []ax.State{ax.StateDead}}
	if k := r.PostForm.Get("kind"); k != "" {
		f.Kinds = []string{k}
	}
	if r.PostForm.Get("all") != "true" {
		for _, s := range r.PostForm["id"] {
			id, err := uuid.Parse(s)
			if err != nil {
				return "", "", badRequest("%q is not a job ID", s)
			}
			f.IDs = append(f.IDs, id)
		}
		if len(f.IDs) == 0 {
			return "No job was ticked.", "/dead", nil
		}
	}
	n, err := h.admin.RetryJobs(r.Context(), f)
	if err != nil {
		return "", "", err
	}
	return fmt.Sprintf("Retried %d dead job(s).", n), "/dead", nil
}

// kindsRow is one kind of the Kinds page, with its flow control in words
// (flow.go, as ax kinds list prints it).
type kindsRow struct {
	ax.KindState
	Breaker    string
	Limits     string
	Now        string
	HasBreaker bool
	Open       bool // open or half-open: the button closes it
	// HasPartBreaker: the kind has a breaker per partition; Partitions
	// lists the partitions whose breaker is kept (at most
	// maxListedPartitions), and MorePartitions how many more are.
	HasPartBreaker bool
	Partitions     []ax.PartitionBreakerState
	MorePartitions int
}

// maxListedPartitions bounds the partition breakers the Kinds page lists
// per kind (`ax kinds partitions` lists them all).
const maxListedPartitions = 20

func (h *Handler) kindsPage(w http.ResponseWriter, r *http.Request) {
	kinds, err := h.admin.Kinds(r.Context())
	body := struct {
		Kinds         []kindsRow
		HasFlow       bool
		Unhandled     []string // kinds no running node handles (the first kindsUnhandledNamed)
		MoreUnhandled int
		Prefix        string // shows only the kinds starting with it
		More          int    // kinds not shown (kindsShown)
		Problem       string
	}{Prefix: r.URL.Query().Get("prefix")}
	if body.Prefix != "" {
		kinds = slices.DeleteFunc(kinds, func(k ax.KindState) bool { return !strings.HasPrefix(k.Kind, body.Prefix) })
	}
	for _, k := range kinds {
		switch {
		case !k.Unhandled:
		case len(body.Unhandled) < kindsUnhandledNamed:
			body.Unhandled = append(body.Unhandled, k.Kind)
		default:
			body.MoreUnhandled++
		}
	}
	if n := len(kinds); n > kindsShown {
		// However many kinds a key created, the page stays bounded.
		kinds, body.More = kinds[:kindsShown], n-kindsShown
	}
	for _, k := range kinds {
		row := kindsRow{KindState: k, Breaker: BreakerSummary(k.Flow), Limits: LimitsSummary(k.Flow), Now: NowSummary(k.Flow)}
		if f := k.Flow; f != nil {
			body.HasFlow = true
			row.HasBreaker = !f.Config.Breaker.IsZero()
			row.Open = row.HasBreaker && !f.Breaker.Closed()
			row.HasPartBreaker = !f.Config.PartitionBreaker.IsZero()
			if row.HasPartBreaker && err == nil {
				var parts []ax.PartitionBreakerState
				parts, err = h.admin.PartitionBreakers(r.Context(), k.Kind)
				if n := len(parts); n > maxListedPartitions {
					parts, row.MorePartitions = parts[:maxListedPartitions], n-maxListedPartitions
				}
				row.Partitions = parts
			}
		}
		body.Kinds = append(body.Kinds, row)
	}
	status := http.StatusOK
	if err != nil {
		p := problemFor(r, err)
		body.Problem, status = p.Detail, p.Status
	}
	h.render(w, r, status, "kinds", "Kinds", pageErr{body, body.Problem})
}

// postBreaker opens or closes a kind's circuit breaker by hand.
func (h *Handler) postBreaker(open bool) func(r *http.Request) (string, string, error) {
	return func(r *http.Request) (string, string, error) {
		kind := r.PathValue("kind")
		set := h.admin.CloseBreaker
		if open {
			set = h.admin.OpenBreaker
		}
		f, err := set(r.Context(), kind)
		if err != nil {
			return "", "", err
		}
		if open {
			return fmt.Sprintf("Opened the breaker of kind %s: no job of it starts until %s, then one probe runs.",
				f.Config.Kind, f.Breaker.ProbeAt.UTC().Format(time.RFC3339)), "/kinds", nil
		}
		return fmt.Sprintf("Closed the breaker of kind %s: its jobs start again.", f.Config.Kind), "/kinds", nil
	}
}

// postPartitionBreaker opens or closes the breaker of one partition of a
// kind by hand: the form's key names the partition ("" the jobs without
// a key).
func (h *Handler) postPartitionBreaker(open bool) func(r *http.Request) (string, string, error) {
	return func(r *http.Request) (string, string, error) {
		kind, key := r.PathValue("kind"), r.PostForm.Get("key")
		set := h.admin.ClosePartitionBreaker
		if open {
			set = h.admin.OpenPartitionBreaker
		}
		p, err := set(r.Context(), kind, key)
		if err != nil {
			return "", "", err
		}
		if open {
			return fmt.Sprintf("Opened the breaker of kind %s partition %q: none of its jobs starts until %s, then one probe runs; the other partitions go on.",
				p.Kind, p.PartitionKey, p.Breaker.ProbeAt.UTC().Format(time.RFC3339)), "/kinds", nil
		}
		return fmt.Sprintf("Closed the breaker of kind %s partition %q: its jobs start again.", p.Kind, p.PartitionKey), "/kinds", nil
	}
}

// pageErr carries a page body with an error to show.
type pageErr struct {
	B       any
	Problem string
}

func (p pageErr) pageError() string { return p.Problem }

func (h *Handler) postKind(pause bool) func(r *http.Request) (string, string, error) {
	return func(r *http.Request) (string, string, error) {
		ks, err := h.setKindPaused(r, r.PathValue("kind"), pause, false)
		if err != nil {
			return "", "", err
		}
		if ks.Paused {
			return fmt.Sprintf("Paused kind %s: no host starts its jobs until it is resumed.", ks.Kind), "/kinds", nil
		}
		return fmt.Sprintf("Resumed kind %s.", ks.Kind), "/kinds", nil
	}
}

func (h *Handler) periodicPage(w http.ResponseWriter, r *http.Request) {
	ss, err := h.admin.Schedules(r.Context())
	body := struct{ Schedules []ax.Schedule }{ss}
	status, msg := http.StatusOK, ""
	if err != nil {
		p := problemFor(r, err)
		msg, status = p.Detail, p.Status
	}
	h.render(w, r, status, "periodic", "Periodic schedules", pageErr{body, msg})
}

func (h *Handler) postSchedule(op scheduleOp) func(r *http.Request) (string, string, error) {
	return func(r *http.Request) (string, string, error) {
		name := r.PathValue("name")
		v, err := h.changeSchedule(r, name, op)
		if err != nil {
			return "", "", err
		}
		switch x := v.(type) {
		case TriggerResponse:
			if x.Duplicate {
				return fmt.Sprintf("Not triggered: schedule %s's previous manual run, job %s, has not ended.", name, x.ID), "/periodic", nil
			}
			return fmt.Sprintf("Triggered schedule %s: job %s.", name, x.ID), "/periodic", nil
		case *ax.Schedule:
			if x.Paused {
				return fmt.Sprintf("Paused schedule %s.", name), "/periodic", nil
			}
		}
		return fmt.Sprintf("Resumed schedule %s.", name), "/periodic", nil
	}
}

func (h *Handler) nodesPage(w http.ResponseWriter, r *http.Request) {
	nodes, err := h.nodesOf(r)
	status, msg := http.StatusOK, ""
	if err != nil {
		p := problemFor(r, err)
		msg, status = p.Detail, p.Status
		nodes = &NodesResponse{}
	}
	h.render(w, r, status, "nodes", "Nodes", pageErr{nodes, msg})
}

type loginBody struct {
	KeyID   string
	Problem string
}

func (b loginBody) pageError() string { return b.Problem }

func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Auth == nil {
		http.Redirect(w, r, basePath(r)+"/", http.StatusSeeOther)
		return
	}
	h.render(w, r, http.StatusOK, "login", "Log in", loginBody{})
}

// postLogin opens a session for a key ID and its secret. A wrong pair
// gets 401 with one message whatever was wrong; attempts are rate
// limited per client address.
func (h *Handler) postLogin(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Auth == nil {
		h.dashError(w, r, http.StatusNotFound, "This dashboard has no login.")
		return
	}
	if err := r.ParseForm(); err != nil {
		h.dashError(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	if !h.sessions.checkCSRF(r) {
		h.dashError(w, r, http.StatusForbidden, "The form's security token is missing or wrong: reload the page and try again.")
		return
	}
	if ok, _ := h.login.allow(clientOf(r)); !ok {
		h.render(w, r, http.StatusTooManyRequests, "login", "Log in", loginBody{Problem: "Too many attempts: wait a moment."})
		return
	}
	keyID, secret := r.PostForm.Get("key_id"), r.PostForm.Get("secret")
	key, known := h.cfg.Auth.keys[keyID]
	want := key.Secret
	if !known {
		want = h.sessions.mac("no such key") // compare anyway: the time does not tell whether the key exists
	}
	if !hmacEqual([]byte(secret), want) || !known {
		logFrom(r.Context()).Info("dashboard login refused", zap.Bool("known_key", known))
		h.authFailed(r)
		h.render(w, r, http.StatusUnauthorized, "login", "Log in", loginBody{KeyID: keyID, Problem: "Unknown key or wrong secret."})
		return
	}
	noteKey(r.Context(), key.ID)
	logFrom(r.Context()).Info("dashboard login", zap.String("key", key.ID), zap.Bool("read_only", key.ReadOnly))
	h.sessions.login(w, r, key)
	h.redirect(w, r, "/", "")
}

func (h *Handler) postLogout(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || !h.sessions.checkCSRF(r) {
		h.dashError(w, r, http.StatusForbidden, "The form's security token is missing or wrong: reload the page and try again.")
		return
	}
	if err := h.sessions.logout(w, r); err != nil {
		logFrom(r.Context()).Error("dashboard logout failed", zapError(err))
		h.dashError(w, r, http.StatusServiceUnavailable, "The logout could not be recorded: try again in a moment.")
		return
	}
	h.redirect(w, r, "/login", "Logged out.")
}
