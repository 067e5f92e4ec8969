// fleetview console: search, live results, object view and fleet status,
// all read through the public REST API (api.js) with the user's token.
import { APIError, get, query, gvrPath, setToken, token, watch } from './api.js';
import { age, labelTerms, objectStatus, toYAML } from './format.js';
import { countPanel, filterCounts } from './counts.js';
import { showRelated } from './related.js';
import { $, el } from './dom.js';
import { feedParams, initHistory, loadTimeline, pageFeed, showFeed } from './history.js';
import { initFleet, loadFleet } from './fleet.js';

// Every view's section; route shows one.
const VIEWS = ['view-search', 'view-object', 'view-fleet', 'view-changes', 'view-deleted'];

// Measurements the browser tests and the benchmark read.
const perf = { lastRender: null, renders: [], events: 0, flushes: 0 };
window.fleetview = { perf };

const app = {
  clusters: [],       // /v1/clusters answer
  kinds: new Map(),   // "group/version/resource" -> {gvr, kind}
  search: null,       // the current search (see runSearch)
  object: null,       // the open object's AbortController
  seq: 0,             // the latest runSearch call
};

// ---- errors ----------------------------------------------------------------

function showError(e) {
  const box = $('error');
  if (!e) { box.hidden = true; box.textContent = ''; return; }
  let msg;
  if (!(e instanceof APIError)) msg = String(e && e.message || e);
  else if (e.status === 0) msg = 'Backend down: ' + e.message;
  else if (e.status === 401) msg = 'Not signed in or token rejected (401). Sign in with a valid token.';
  else if (e.status === 403) msg = 'Forbidden (403): your token may not read this. ' + e.message;
  else if (e.status === 503) msg = 'Not ready (503): ' + e.message;
  else msg = `Error ${e.status}: ${e.message}`;
  box.textContent = msg;
  box.hidden = false;
  if (e instanceof APIError && e.status === 401) showLogin();
}

function showLogin() {
  stopSearchWatches();
  for (const v of VIEWS) $(v).hidden = true;
  $('results').tBodies[0].replaceChildren();
  for (const t of ['changes', 'deleted']) $(t).tBodies[0].replaceChildren();
  $('login').hidden = false;
  $('signout').hidden = !token();
  $('token').focus();
}

// ---- routing ---------------------------------------------------------------

function route() {
  const h = location.hash || '#/search';
  const [path, qs] = h.slice(1).split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  $('login').hidden = true;
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', parts[0] === a.dataset.view || (parts[0] === 'object' && a.dataset.view === 'search'));
  for (const v of VIEWS) $(v).hidden = true;
  if (app.object) { app.object.abort(); app.object = null; }
  if (parts[0] === 'fleet') { $('view-fleet').hidden = false; loadFleet(); return; }
  if (parts[0] === 'changes' || parts[0] === 'deleted') {
    stopSearchWatches();
    $('view-' + parts[0]).hidden = false;
    showFeed(parts[0], Object.fromEntries(new URLSearchParams(qs || '')));
    return;
  }
  if (parts[0] === 'object' && parts.length === 7) { $('view-object').hidden = false; openObject(parts.slice(1)); return; }
  $('view-search').hidden = false;
  const p = Object.fromEntries(new URLSearchParams(qs || ''));
  fillForm(p);
  // Coming back from an object keeps the page (and its continue tokens).
  if (app.search && app.search.key === searchKey(p)) {
    const s = app.search;
    renderCounts(s);
    if (!s.watching) startSearchWatches(s, [...s.rows.values()]);
    return;
  }
  runSearch(p, 0);
}

function searchKey(p) { return JSON.stringify([p.q || '', p.kind || '', p.ns || '', p.cluster || '', p.csel || '', p.limit || '']); }

// ---- bootstrap -------------------------------------------------------------

async function loadInventory() {
  const res = await get('/v1/clusters');
  applyInventory(res.clusters || []);
}

// applyInventory takes the clusters' kinds and readiness into the search
// filters (each time the fleet view reads them too: a cluster that stops
// being ready is marked in the cluster filter).
function applyInventory(clusters) {
  app.clusters = clusters;
  app.kinds.clear();
  for (const c of app.clusters) for (const r of c.resources || []) {
    const k = gvrPath(r.gvr);
    if (!app.kinds.has(k)) app.kinds.set(k, { gvr: { group: r.gvr.group || '', version: r.gvr.version, resource: r.gvr.resource }, kind: r.kind || r.gvr.resource });
  }
  const kindSel = $('kind'), cur = kindSel.value;
  kindSel.replaceChildren(el('option', { value: '', text: 'all kinds (text)' }));
  for (const [k, v] of [...app.kinds].sort((a, b) => a[1].kind.localeCompare(b[1].kind))) kindSel.append(el('option', { value: k, text: v.kind + (v.gvr.group ? '.' + v.gvr.group : '') }));
  kindSel.value = cur;
  const clSel = $('cluster'), curc = clSel.value;
  clSel.replaceChildren(el('option', { value: '', text: 'all clusters' }));
  for (const c of app.clusters) clSel.append(el('option', { value: c.name, text: c.name + (c.ready ? '' : ' (not ready)') }));
  clSel.value = curc;
}

async function start() {
  showError(null);
  try {
    await loadInventory();
  } catch (e) { showError(e); return; }
  $('signout').hidden = !token();
  route();
}

// ---- search ----------------------------------------------------------------

function fillForm(p) {
  $('q').value = p.q || '';
  $('ns').value = p.ns || '';
  $('csel').value = p.csel || '';
  $('limit').value = p.limit || '100';
  $('cluster').value = p.cluster || '';
  const kind = p.kind !== undefined ? p.kind : (app.kinds.has('core/v1/pods') ? 'core/v1/pods' : '');
  setKind(kind);
}

// setKind selects a kind, adding it when the inventory does not list it
// (yet), so the form submits what the URL asked for.
function setKind(kind) {
  const sel = $('kind');
  if (kind && ![...sel.options].some((o) => o.value === kind)) sel.append(el('option', { value: kind, text: kind }));
  sel.value = kind;
}

function formParams() {
  const p = {};
  for (const k of ['q', 'kind', 'ns', 'cluster', 'csel', 'limit']) p[k] = $(k).value.trim();
  return p;
}

// A search lists one kind (label terms as a labelSelector, exact counts)
// or, with free text, searches (label terms then filter the page here, as
// the search API takes no label selector).
async function runSearch(p, pageIndex, tokens) {
  stopSearchWatches();
  if (app.search) app.search.ctrl.abort(); // its answers and counts are stale
  const t0 = performance.now();
  const { text, terms } = labelTerms(p.q || '');
  const kind = p.kind !== undefined ? p.kind : (app.kinds.has('core/v1/pods') ? 'core/v1/pods' : '');
  const limit = Number(p.limit || 100);
  // A kind the inventory did not list yet (a registry just applied): the
  // inventory is read again, for its kinds, clusters and readiness.
  const seq = ++app.seq;
  if (kind && !app.kinds.has(kind)) {
    try { await loadInventory(); } catch { /* the search itself reports errors */ }
    if (seq !== app.seq) return; // a newer search started meanwhile
    setKind(kind);
  }
  const s = {
    key: searchKey(p), p, text, terms, limit, pageIndex, tokens: tokens || [''],
    gvr: kind ? kindGVR(kind) : null, rows: new Map(), queue: [], added: 0, ctrl: new AbortController(), rv: '',
  };
  app.search = s;
  $('notice').hidden = true;
  if (!text && !s.gvr) {
    notice(kind ? `${kind} is not group/version/resource.` : 'Type some text to search all kinds, or choose a kind.');
    renderRows(s, []);
    return;
  }
  const common = { namespace: p.ns, clusters: p.cluster, clusterSelector: p.csel, limit, continue: s.tokens[pageIndex] };
  let items, res;
  try {
    if (!text) {
      res = await get(`/v1/resources/${gvrPath(s.gvr)}${query({ ...common, labelSelector: terms.join(',') })}`, s.ctrl.signal);
      items = (res.items || []).map((o) => ({ obj: o, gvr: s.gvr, cluster: clusterOf(o) }));
      s.remaining = res.remainingItemCount;
    } else {
      res = await get(`/v1/search${query({ ...common, text, resources: kind })}`, s.ctrl.signal);
      items = (res.items || []).map((it) => ({ obj: it.object, gvr: it.gvr, cluster: it.cluster }));
      if (terms.length) items = items.filter((it) => matchesTerms(it.obj, terms));
      s.remaining = undefined;
    }
  } catch (e) {
    if (e.name === 'AbortError') return;
    if (e instanceof APIError && e.status === 410 && pageIndex > 0) {
      notice('The result set changed too much to continue from this page; showing the first page again.');
      return runSearch(p, 0);
    }
    renderRows(s, []);
    showError(e);
    return;
  }
  if (app.search !== s) return;
  showError(null);
  s.rv = res.resourceVersion || '';
  s.tokens[pageIndex + 1] = res.continue || '';
  renderRows(s, items);
  const ms = performance.now() - t0;
  const rec = { ms, rows: items.length, at: Date.now(), painted: null };
  perf.lastRender = rec;
  perf.renders.push(rec);
  // The frame that shows the rows: the next animation frame has laid them
  // out, and a task queued from it runs after that frame is painted.
  requestAnimationFrame(() => setTimeout(() => { rec.painted = performance.now() - t0; }, 0));
  $('timing').textContent = `${items.length} rows in ${ms.toFixed(0)} ms`;
  renderCounts(s);
  notReadyNotice(p);
  startSearchWatches(s, items);
  if (!text) {
    countPerCluster(s);
    filterCounts(app.kinds, s);
    countPanel(s);
  }
}

// kindGVR resolves the kind filter ("group/version/resource"): a link to a
// kind works even before the inventory lists it.
function kindGVR(kind) {
  const known = app.kinds.get(kind);
  if (known) return known.gvr;
  const p = kind.split('/');
  return p.length === 3 && p.every(Boolean) ? { group: p[0] === 'core' ? '' : p[0], version: p[1], resource: p[2] } : null;
}

function notice(msg) { const n = $('notice'); n.textContent = msg; n.hidden = !msg; }

function notReadyNotice(p) {
  const bad = app.clusters.filter((c) => (!p.cluster || c.name === p.cluster) && !c.ready).map((c) => c.name);
  if (bad.length) notice(`Not ready: ${bad.join(', ')} — results from ${bad.length === 1 ? 'this cluster' : 'these clusters'} may be stale or missing.`);
}

function clusterOf(o) {
  const a = (o.metadata && o.metadata.annotations) || {};
  return a['fleetview.io/cluster'] || a['resource.karmada.io/cached-from-cluster'] || '';
}

function matchesTerms(o, terms) {
  const l = (o.metadata && o.metadata.labels) || {};
  return terms.every((t) => {
    const m = /^([^!=]+)(!=|==|=)(.*)$/.exec(t);
    if (!m) return true;
    return m[2] === '!=' ? l[m[1]] !== m[3] : l[m[1]] === m[3];
  });
}

function rowKey(cluster, o) { return cluster + '/' + ((o.metadata && o.metadata.uid) || (o.metadata.namespace + '/' + o.metadata.name)); }

function objectHref(cluster, gvr, o) {
  const m = o.metadata || {};
  return '#/object/' + [cluster, gvr.group || 'core', gvr.version, gvr.resource, m.namespace || '-', m.name].map(encodeURIComponent).join('/');
}

// List items may lack kind (Kubernetes list items do): the inventory's
// kind for the resource comes first.
function kindOf(it) { return app.kinds.get(gvrPath(it.gvr))?.kind || it.obj.kind || it.gvr.resource; }

// A results cell: the results are laid out as grid rows, which drops a
// table's semantics, so each cell says what it is (index.html's header too).
const cell = (props, ...kids) => el('td', { role: 'cell', ...props }, ...kids);

// renderRows builds only the page's rows, in one fragment.
function renderRows(s, items) {
  const tbody = $('results').tBodies[0];
  const frag = document.createDocumentFragment();
  for (const it of items) {
    const r = { ...it, tr: null, cells: null };
    const tr = el('tr', { role: 'row' });
    const name = el('a', { href: objectHref(it.cluster, it.gvr, it.obj) });
    const cells = { status: cell(), labels: cell({ class: 'labels' }), age: cell() };
    tr.append(cell({ text: it.cluster }), cell({ text: kindOf(it), class: 'hide-narrow' }), cell({ text: it.obj.metadata.namespace || '' }),
      cell({}, name), cells.status, cells.labels, cells.age);
    name.textContent = it.obj.metadata.name;
    r.tr = tr; r.cells = cells;
    fillRow(r);
    s.rows.set(rowKey(it.cluster, it.obj), r);
    frag.append(tr);
  }
  tbody.replaceChildren(frag);
  $('prev').disabled = s.pageIndex === 0;
  $('next').disabled = !s.tokens[s.pageIndex + 1];
  $('pageinfo').textContent = items.length ? `page ${s.pageIndex + 1}` + (s.remaining !== undefined ? ` · ${s.remaining} more` : '') : 'no results';
}

function fillRow(r) {
  const o = r.obj;
  const st = objectStatus(o, kindOf(r));
  r.cells.status.textContent = st.text;
  r.cells.status.className = st.cls;
  const labels = (o.metadata && o.metadata.labels) || {};
  const pairs = Object.entries(labels).map(([k, v]) => `${k}=${v}`);
  r.cells.labels.replaceChildren(...pairs.map((p) => el('span', { class: 'lbl', text: p })));
  r.cells.labels.title = pairs.join('\n');
  r.cells.age.textContent = age(o.metadata && o.metadata.creationTimestamp);
}

// Counts: per cluster and kind on this page; for a kind list, exact totals
// per cluster (one limit=1 list each, which returns remainingItemCount).
function renderCounts(s) {
  const byCluster = new Map(), byKind = new Map();
  for (const r of s.rows.values()) {
    byCluster.set(r.cluster, (byCluster.get(r.cluster) || 0) + 1);
    const k = kindOf(r);
    byKind.set(k, (byKind.get(k) || 0) + 1);
  }
  const box = $('counts');
  const chips = [];
  const totals = s.clusterTotals;
  if (totals) {
    let sum = 0;
    for (const [c, n] of totals) { sum += n; chips.push(chip(c, n, 'cluster-count total')); }
    const first = s.rows.values().next().value;
    chips.unshift(chip(first ? kindOf(first) : (app.kinds.get(s.p.kind)?.kind || 'objects'), sum, 'kind-count total'));
  } else {
    for (const [k, n] of byKind) chips.push(chip(k, n, 'kind-count'));
    for (const [c, n] of byCluster) chips.push(chip(c, n, 'cluster-count'));
    if (chips.length) chips.push(el('span', { class: 'muted', text: '(this page)' }));
  }
  box.replaceChildren(...chips);
}

function chip(label, n, cls) {
  const c = el('span', { class: 'chip ' + cls, title: label });
  c.append(label + ' ', el('b', { text: String(n) }));
  return c;
}

async function countPerCluster(s) {
  const names = app.clusters.filter((c) => !s.p.cluster || c.name === s.p.cluster).map((c) => c.name);
  if (names.length === 0 || names.length > 50) return;
  const { terms } = s;
  try {
    const counts = await Promise.all(names.map(async (c) => {
      const r = await get(`/v1/resources/${gvrPath(s.gvr)}${query({ namespace: s.p.ns, clusters: c, clusterSelector: s.p.csel, labelSelector: terms.join(','), limit: 1 })}`, s.ctrl.signal);
      return [c, (r.items || []).length + Number(r.remainingItemCount || 0)];
    }));
    if (app.search !== s) return;
    s.clusterTotals = counts.filter(([, n]) => n > 0);
    renderCounts(s);
  } catch (e) {
    if (e.name !== 'AbortError') renderCounts(s); // page counts stay
  }
}

// dropSearch ends the current search (its requests and watches), so the
// next route runs a fresh one.
function dropSearch() {
  stopSearchWatches();
  if (app.search) app.search.ctrl.abort();
  app.search = null;
}

// ---- live results ------------------------------------------------------------

// Each start of a search's watches has its own AbortController, so a watch
// ended by a stop can never mistake a later start's for its own and resume.
function stopSearchWatches() {
  const s = app.search;
  if (s) {
    if (s.watchCtrl) s.watchCtrl.abort();
    s.watchCtrl = null;
    s.queue = [];
    s.watching = false;
  }
  setLive(null);
}

function setLive(on, why) {
  const l = $('live');
  if (on === null) { l.hidden = true; return; }
  l.hidden = false;
  l.className = 'live ' + (on ? 'on' : 'off');
  l.textContent = on ? 'live' : 'live updates stopped' + (why ? ': ' + why : '');
}

// One watch per resource on the page, from the page's resourceVersion, so
// no change between the answer and the watch is missed.
function startSearchWatches(s, items) {
  if (!s.rv) return;
  const ctrl = new AbortController();
  s.watchCtrl = ctrl;
  s.watching = true;
  const gvrs = new Map();
  if (s.gvr) gvrs.set(gvrPath(s.gvr), s.gvr);
  for (const it of items) gvrs.set(gvrPath(it.gvr), it.gvr);
  const filter = { namespace: s.p.ns, clusters: s.p.cluster, clusterSelector: s.p.csel };
  if (!s.text) filter.labelSelector = s.terms.join(',');
  setLive(true);
  for (const gvr of gvrs.values()) {
    const run = (rv, attempt) => watch(gvr, { ...filter, resourceVersion: rv, allowBookmarks: true }, (ev) => {
      if (ev.resourceVersion) rv = ev.resourceVersion;
      if (ev.type !== 'BOOKMARK') enqueue(s, ev, gvr);
    }, ctrl.signal).then(() => {
      if (!ctrl.signal.aborted) run(rv, 0); // the server ended it (timeout): resume
    }, (e) => {
      if (ctrl.signal.aborted) return;
      if (e instanceof APIError && (e.status === 401 || e.status === 403)) { setLive(false, e.status); showError(e); return; }
      if (e instanceof APIError && e.status === 410) { runSearch(s.p, s.pageIndex, s.tokens); return; }
      setLive(false, e.message);
      // Backend down or restarting: try again, backing off.
      setTimeout(() => { if (!ctrl.signal.aborted) { setLive(true); run(rv, attempt + 1); } }, Math.min(10000, 500 * 2 ** attempt));
    });
    run(s.rv, 0);
  }
}

// Events are applied in batches, in an animation frame and at most every
// FLUSH_MS, so 100 events/s cost about ten table layouts a second instead
// of one per event (or per frame), and each change still shows well within
// a second.
const FLUSH_MS = 100;
let lastFlush = 0;
function enqueue(s, ev, gvr) {
  perf.events++;
  s.queue.push([ev, gvr]);
  if (s.queue.length !== 1) return;
  const wait = Math.max(0, lastFlush + FLUSH_MS - performance.now());
  if (wait === 0) requestAnimationFrame(() => flush(s));
  else setTimeout(() => requestAnimationFrame(() => flush(s)), wait);
}

function flush(s) {
  const q = s.queue;
  s.queue = [];
  lastFlush = performance.now();
  if (app.search !== s) return;
  perf.flushes++;
  const latest = new Map();
  for (const [ev, gvr] of q) {
    if (!ev.object) continue;
    const c = ev.cluster || clusterOf(ev.object);
    latest.set(rowKey(c, ev.object), [ev, gvr, c]);
  }
  let added = 0;
  for (const [key, [ev, , c]] of latest) {
    const r = s.rows.get(key);
    if (!r) {
      if (ev.type === 'ADDED' || ev.type === 'MODIFIED') {
        if (!s.text || matchesText(ev.object, s.text)) added++;
      }
      continue;
    }
    if (ev.type === 'DELETED') { r.tr.classList.add('deleted'); continue; }
    if (s.terms.length && s.text && !matchesTerms(ev.object, s.terms)) { r.tr.classList.add('deleted'); continue; }
    r.obj = ev.object;
    r.cluster = c;
    r.tr.classList.remove('deleted');
    fillRow(r);
  }
  if (added) {
    s.added += added;
    notice(`${s.added} new or changed object${s.added === 1 ? '' : 's'} match outside this page — press Search to refresh.`);
  }
}

function matchesText(o, text) {
  const m = o.metadata || {};
  const hay = [m.name, m.namespace, ...Object.entries(m.labels || {}).flat(), ...Object.entries(m.annotations || {}).flat()].join('\n').toLowerCase();
  return hay.includes(text.toLowerCase());
}

// ---- object view -------------------------------------------------------------

async function openObject([cluster, group, version, resource, ns, name]) {
  const ctrl = new AbortController();
  app.object = ctrl;
  const gvr = { group: group === 'core' ? '' : group, version, resource };
  const namespace = ns === '-' ? '' : ns;
  const back = app.search ? '#/search?' + new URLSearchParams(app.search.p).toString() : '#/search';
  $('back').setAttribute('href', back);
  $('obj-title').textContent = `${cluster} · ${resource}/${name}` + (namespace ? ` · ${namespace}` : '');
  $('obj-yaml').textContent = 'loading…';
  $('obj-source').replaceChildren();
  $('obj-others').replaceChildren();
  $('obj-related').replaceChildren();
  $('obj-title').classList.remove('bad');
  let res;
  try {
    res = await get(`/v1/resources/${gvrPath(gvr)}/${encodeURIComponent(name)}${query({ namespace, cluster })}`, ctrl.signal);
  } catch (e) {
    if (e.name === 'AbortError') return;
    $('obj-yaml').textContent = '';
    // Not in the cache: a deleted object still has its timeline.
    if (e instanceof APIError && e.status === 404) { showError(null); loadTimeline(gvr, namespace, name, cluster, ctrl.signal, true); return; }
    showError(e);
    return;
  }
  showError(null);
  showObject(res.object);
  loadTimeline(gvr, namespace, name, cluster, ctrl.signal, false);
  otherClusters(gvr, namespace, name, cluster, ctrl.signal);
  showRelated(gvr, namespace, name, cluster, ctrl.signal);
  // Live: the object's own watch (by name, in its cluster).
  setLive(true);
  let rv = '';
  const run = () => watch(gvr, { namespace, clusters: cluster, fieldSelector: 'metadata.name=' + name, allowBookmarks: true, resourceVersion: rv },
    (ev) => {
      if (ev.resourceVersion) rv = ev.resourceVersion;
      if (ev.type === 'BOOKMARK' || !ev.object) return;
      perf.events++;
      if (ev.type === 'DELETED') { $('obj-title').classList.add('bad'); notice('This object was deleted.'); return; }
      showObject(ev.object);
      refreshTimeline(gvr, namespace, name, cluster, ctrl.signal);
    }, ctrl.signal).then(() => { if (!ctrl.signal.aborted) run(); }, (e) => { if (!ctrl.signal.aborted) { setLive(false, e.message); showError(e); } });
  run();
}

// refreshTimeline reads the timeline again after a live change, at most
// once a second (the history records the change as the cache does).
let timelineTimer = 0;
function refreshTimeline(gvr, namespace, name, cluster, signal) {
  clearTimeout(timelineTimer);
  timelineTimer = setTimeout(() => { if (!signal.aborted) loadTimeline(gvr, namespace, name, cluster, signal, false); }, 1000);
}

function showObject(o) {
  const a = (o.metadata && o.metadata.annotations) || {};
  const src = $('obj-source');
  src.replaceChildren();
  for (const k of ['fleetview.io/cluster', 'resource.karmada.io/cached-from-cluster']) {
    src.append(el('dt', { text: k }), el('dd', { text: a[k] || '—' }));
  }
  const st = objectStatus(o);
  src.append(el('dt', { text: 'status' }), el('dd', { text: st.text || '—', class: st.cls }));
  $('obj-yaml').textContent = toYAML(o);
}

async function otherClusters(gvr, namespace, name, cluster, signal) {
  const box = $('obj-others');
  try {
    const res = await get(`/v1/resources/${gvrPath(gvr)}${query({ namespace, fieldSelector: 'metadata.name=' + name })}`, signal);
    const others = (res.items || []).map((o) => [clusterOf(o), o]).filter(([c]) => c && c !== cluster);
    if (!others.length) { box.replaceChildren(el('span', { class: 'muted', text: 'In no other cluster.' })); return; }
    box.replaceChildren(el('span', { text: 'Also in: ' }), ...others.map(([c, o]) => el('a', { href: objectHref(c, gvr, o), text: c })));
  } catch (e) {
    if (e.name !== 'AbortError') box.replaceChildren(el('span', { class: 'muted', text: 'Other clusters unknown: ' + e.message }));
  }
}

// ---- wiring ------------------------------------------------------------------

function wire() {
  $('login-form').addEventListener('submit', (e) => {
    e.preventDefault();
    setToken($('token').value.trim());
    $('token').value = '';
    dropSearch();
    start();
  });
  $('signout').addEventListener('click', () => { setToken(''); dropSearch(); showLogin(); });
  $('search-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const p = formParams();
    const h = '#/search?' + new URLSearchParams(p).toString();
    dropSearch();
    if (location.hash === h) route(); else location.hash = h;
  });
  $('next').addEventListener('click', () => { const s = app.search; if (s && s.tokens[s.pageIndex + 1]) runSearch(s.p, s.pageIndex + 1, s.tokens); });
  $('prev').addEventListener('click', () => { const s = app.search; if (s && s.pageIndex > 0) runSearch(s.p, s.pageIndex - 1, s.tokens); });
  $('fleet-refresh').addEventListener('click', loadFleet);
  $('count-by').addEventListener('change', () => { $('count-dim').hidden = $('count-by').value !== 'custom'; countPanel(app.search); });
  $('count-dim').addEventListener('change', () => countPanel(app.search));
  for (const [view, f] of [['changes', 'ch'], ['deleted', 'del']]) {
    $(f + '-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const h = `#/${view}?` + new URLSearchParams(feedParams(view)).toString();
      if (location.hash === h) route(); else location.hash = h;
    });
    $(f + '-next').addEventListener('click', () => pageFeed(view, 1));
    $(f + '-prev').addEventListener('click', () => pageFeed(view, -1));
  }
  window.addEventListener('hashchange', route);
  // Keyboard: "/" focuses the search box; n and p page.
  document.addEventListener('keydown', (e) => {
    const t = e.target;
    if (t instanceof HTMLInputElement || t instanceof HTMLSelectElement || t instanceof HTMLTextAreaElement || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === '/') { e.preventDefault(); location.hash.startsWith('#/search') || !location.hash ? $('q').focus() : (location.hash = '#/search'); }
    else if (e.key === 'n' && !$('view-search').hidden) $('next').click();
    else if (e.key === 'p' && !$('view-search').hidden) $('prev').click();
  });
}

initHistory({ showError, kinds: () => app.kinds, clusters: () => app.clusters });
initFleet({ showError, stopSearchWatches, applyInventory });
wire();
start();
