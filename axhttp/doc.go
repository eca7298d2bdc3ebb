// Package axhttp serves AX over HTTP: a signed JSON API to submit and
// operate jobs, completion callbacks, and a web dashboard, in one
// http.Handler to mount under any prefix:
//
//	act := axhttp.NewActivity(nil) // also in ax.Config.Observers
//	auth, _ := axhttp.NewAuth(axhttp.AuthConfig{Keys: keys, Nonces: nonces})
//	h, _ := axhttp.New(axhttp.Config{Scheduler: s, Auth: auth, Activity: act})
//	mux.Handle("/ax/", http.StripPrefix("/ax", h))
//
// or run it with the CLI: ax serve.
//
// # Routes
//
// Below the mount point; the OpenAPI 3.1 document at /api/v1/openapi.json
// describes the API's requests, responses and errors, and a test checks it
// against the real responses.
//
//	GET  /api/v1/openapi.json            this API's OpenAPI document
//	POST /api/v1/jobs                    schedule a job (201; 200 and duplicate for a held unique_key)
//	POST /api/v1/jobs/batch              schedule up to 1000 jobs, all or none
//	GET  /api/v1/jobs                    list jobs in brief (?preview=N bytes of each payload): the CLI's filters as query parameters, cursors
//	GET  /api/v1/jobs/count              count the jobs a filter selects
//	POST /api/v1/jobs/retry              retry the jobs a filter selects (all=true for every job)
//	POST /api/v1/jobs/cancel             cancel the jobs a filter selects (all=true for every job)
//	GET  /api/v1/jobs/{id}               one job, with its attempts
//	GET  /api/v1/jobs/{id}/followups     the jobs its end inserted (callback deliveries), by
//	                                     page and in brief (order, limit, cursor, preview)
//	POST /api/v1/jobs/{id}/retry         make one job due now (409 when its state does not allow it)
//	POST /api/v1/jobs/{id}/cancel        cancel one job (409 likewise)
//	GET  /api/v1/kinds                   kinds: pause state, jobs by state, nodes, unhandled; a page in name order (limit, after, prefix)
//	POST /api/v1/kinds/{kind}/pause      pause a kind cluster-wide (404 for a kind nobody runs, unless force=true)
//	POST /api/v1/kinds/{kind}/resume     resume it (the store then keeps no row of it)
//	GET  /api/v1/kinds/{kind}/partitions the breakers of its failing partitions (ax.PartitionBreaker; 404 without one); a page in key order (limit, after)
//	POST /api/v1/kinds/{kind}/partitions/open?key=K   open one partition's breaker (key= the jobs without a key)
//	POST /api/v1/kinds/{kind}/partitions/close?key=K  close it: its jobs start again at once
//	GET  /api/v1/periodic                periodic schedules with their next ticks
//	POST /api/v1/periodic/{name}/pause   pause a schedule
//	POST /api/v1/periodic/{name}/resume  resume it
//	POST /api/v1/periodic/{name}/trigger run its job once, now (duplicate: its previous manual run has not ended; force=true runs it anyway)
//	GET  /api/v1/nodes                   nodes and the maintenance leader
//	GET  /api/v1/stats                   the queue by kind and state, kinds in trouble first (limit, prefix, kind)
//
// The dashboard: / (overview per kind: jobs by state, the oldest due
// job, and throughput, failures and start lag over the last hour, or
// day with ?range=day, read from the store when it is a
// store.ActivityReader, so every server draws the same, otherwise this
// host's Activity), /jobs (the job list with the filters and per-state
// totals), /find (a job by its ID or first digits), /jobs/{id} (payload,
// metadata, every attempt with its error and stack, timeline, callback
// deliveries; each value bounded, see below), /jobs/{id}/raw/{part}
// (payload, result, metadata or errors whole, as application/json),
// /dead (dead letters grouped by kind and error, callback deliveries
// apart, counted in the store over every dead job when it is a
// store.DeadGrouper, optionally only those that died within ?window=1h;
// retried or discarded per group, acting only on the jobs the group
// counted when the page was drawn; one by one or in bulk), /kinds
// (pause and resume; breaker open and close, limits, running count and
// rate; a kind's failing partitions, each partition's breaker opened or
// closed by hand; kinds no running node handles while their jobs are due, marked
// unhandled, see ax.Config.UnhandledKindGrace), /periodic (schedules, next ticks, pause, resume, run now),
// /nodes (nodes and leader), /login, and /static/{file} (embedded assets,
// served by exact name only). Pages refresh their content every
// Config.RefreshInterval (a small embedded script; such requests carry
// X-AX-Refresh and renew no session) and show relative times beside
// absolute ones. A read-only caller sees no lease token, no network
// address in callback deliveries' errors, and, on a server with the key
// ring (ax.Config.Keys), the values given with ax.SecretMetadata still
// sealed ("encrypted (key ID)"; payloads and results open).
//
// Listings are in brief: GET /api/v1/jobs and the dashboard's lists (the
// jobs a /find prefix names too) read and send ListPreviewBytes (or
// ?preview=N) of each job's payload, result and latest error, with their
// sizes (store.Brief), never the whole values, so a page of 1,000 jobs
// with 1 MB payloads costs the server megabytes. The overview lists kinds in trouble first (dead jobs, kinds
// no node handles, the longest due wait, paused) and at most 200 of
// them; the kinds page at most 500. GET /api/v1/kinds answers a page of
// KindsLimit kinds (?limit=N, at most MaxKindsLimit) and never more than
// MaxKindsBytes of them, in name order, the same JSON array as before:
// X-Total-Count counts the kinds and, when some were left out, a Link
// header with rel="next" names the next page (?after=the last kind
// sent); GET /api/v1/kinds/{kind}/partitions pages a kind's partition
// breakers the same way, in key order. GET /api/v1/stats keeps as many
// kinds, trouble first, in its
// per-kind fields, and adds kinds_total and truncated; ?kind= and
// ?prefix= select the kinds. So 20,000 kinds answer in about 60 KB. Every answer over a TLS connection the process terminates carries
// Strict-Transport-Security (a year).
//
// # Hostile input
//
// Whoever can submit a job controls its kind, payload and metadata, and
// its handler's errors; whoever opens its page may be a read-only
// operator. So request bodies must be valid UTF-8 without lone UTF-16
// surrogate escapes (encoding/json would silently turn both into U+FFFD,
// storing a kind no handler serves): 400 otherwise. A payload may nest
// MaxPayloadDepth (64) levels of arrays and objects: 400 beyond, nothing
// stored. Pages bound what they render of any job, however it was
// stored (a Go program may schedule deeper payloads): payload and result
// are pretty-printed up to 16 KB and 16 indented levels (deeper levels
// stay on one line), metadata up to 50 entries, attempts the last 10
// with 4 KB of error each, so a job page stays under about half a
// megabyte; a cut value says so and links its raw route, which writes
// the stored bytes unchanged with nosniff and a sandbox CSP. Every value
// is escaped by html/template and the pages' CSP allows no inline script.
// A pause of a kind absent from Admin.Kinds (no jobs, no running node
// handles it, not paused) is refused with 404 unless forced, so a typo
// or a "../" in a path stores nothing.
//
// # Authentication
//
// With Config.Auth, every API request is signed with a key's secret
// (AX-HMAC-SHA256, see Signer for the scheme and Auth for the checks: a
// ±5 minute window, nonces remembered for twice that, several keys at
// once for rotation, read-only keys, constant-time comparison). Nonces
// are shared by every server on one store with StoreNonces (NoncesFor
// picks it when the store implements store.NonceKeeper, MemoryNonces
// otherwise). The dashboard asks for a login with a key ID and its
// secret and keeps a signed session cookie; read-only keys get the
// read-only dashboard. Every dashboard change is a POST with a CSRF token
// (see session.go); browsers' cross-origin requests are refused besides.
//
// A session lasts Config.SessionTTL (DefaultSessionTTL, 8h) at most and
// ends after Config.SessionIdleTimeout (DefaultSessionIdleTimeout, 30m)
// without a request. A logout revokes it server-side, and RevokeSessions
// (ax sessions revoke) every session of a key: both are recorded in
// Config.Revocations, the store when it is a store.RevocationKeeper, so
// every server on the store refuses a copied cookie at once. Give every
// server behind one address the same Config.SessionKey (ax serve:
// AX_SESSION_KEY): without one each process makes its own, so a restart
// logs everyone out and servers refuse each other's cookies.
//
// Without Config.Auth the handler trusts every request: put your own
// authentication in front and name the caller with WithIdentity (a
// read-only identity reads only). Config.ReadOnly makes everyone
// read-only.
//
// Every request gets a request ID (X-Request-ID, logged with the method,
// path, status, duration, key and client address) and a body limit
// (Config.MaxBodyBytes).
//
// # Limits
//
// Before anything else, each client address has a request rate
// (Config.ClientRateLimit) and a budget of failed authentications
// (Config.FailureLimit: 401s of the API, bodies over the limit read
// before a signature could be checked, and failed logins each take a
// token); an address over its rate gets 429 (urn:ax:problem:rate-limited,
// like a key over its limit) with Retry-After, and so does whatever an
// address without failure budget sends that cannot prove itself without
// its body being read: a request with a body (left unread), a bad or
// missing signature, a login, a page without a session. A signed request
// without a body whose signature is right, and a valid dashboard
// session, are still served, so one client cannot lock out the others
// that share its address. A signed request's key is then held to Config.RateLimit, checked
// after the signature and before the nonce is recorded, so a request
// refused with 429 can be sent again. All three are off in the zero
// Config; ax serve turns the first two on. The dashboard's logins are
// throttled per address besides (10 at once, then one a second). The
// client address is RemoteAddr's, or, from a trusted reverse proxy
// (Config.TrustedProxies), the rightmost X-Forwarded-For address that is
// not a trusted proxy; IPv6 addresses count by /64.
//
// # Errors
//
// API errors are RFC 9457 problem documents (application/problem+json)
// whose "instance" is the request ID. Clients switch on "type", a stable
// URN; titles and details are for people and may change. The types:
//
//	urn:ax:problem:unauthorized      401 missing, expired, reused or wrong signature; unknown key
//	urn:ax:problem:forbidden         403 a read-only key asked for a change; a cross-origin request
//	urn:ax:problem:not-found         404 no such job, schedule or route; a pause of a kind nobody runs
//	urn:ax:problem:method            405 the route does not take this method (Allow lists those it takes)
//	urn:ax:problem:conflict          409 the job's state does not allow the change
//	urn:ax:problem:too-large         413 the body is over the limit
//	urn:ax:problem:unsupported-type  415 the body is not application/json
//	urn:ax:problem:rate-limited      429 the key's rate limit is exhausted (Retry-After says when)
//	urn:ax:problem:bad-request       400 malformed JSON, not UTF-8, nested too deep; an invalid parameter, filter, cursor or option
//	urn:ax:problem:internal          500 an unexpected error (logged with the request ID, not told)
//	urn:ax:problem:unsupported       501 the store cannot do this, or the server schedules no jobs
//	urn:ax:problem:unavailable       503 the scheduler is stopping; the nonce store failed
//	urn:ax:problem:backpressure      503 the kind (or every kind) has too many pending jobs (ax.MaxPending); nothing was stored; Retry-After: 1
//
// No answer tells a secret, a signature, or which signature check failed.
//
// # Completion callbacks
//
// A job submitted with "callback_url" (Config.CallbackPolicy) has its end
// POSTed there, signed like API requests, by a follow-up job of kind
// CallbackKind that hosts running RegisterCallbacks deliver, with retries;
// a delivery that runs out of attempts is a dead job, shown on its parent's
// page as "callback failed". This needs a store that keeps follow-ups
// (store.FollowUpStore).
package axhttp
