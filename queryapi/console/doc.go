// Package console is fleetview's web console: static HTML, CSS and ES
// modules embedded in the binary and served under /console/ by the query
// API's HTTP server.
//
// It owns the assets and the headers they are served with (a strict
// Content-Security-Policy: scripts, styles and connections from the same
// origin only, no inline script, no frames). The console's code in the
// browser reads everything through the public REST API (/v1) with the
// user's bearer token, so it gets exactly what that token may read; this
// package must not serve data, read the cache, or hold any state of its
// own. The assets are public and contain no data. The modules: app.js
// (routing, search, the object view), history.js (an object's timeline,
// recent changes, recently deleted: /v1/revisions and /v1/changes),
// fleet.js (clusters and registries), api.js (the REST calls and the
// watch stream), and the DOM-free helpers format.js and diff.js.
package console
