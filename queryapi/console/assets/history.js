// The fleet's memory (issue #48): an object's timeline with diffs, the
// "Recent changes" feed and the "Recently deleted" view, read from
// /v1/revisions and /v1/changes with the user's token (api.js), which
// the hub authorizes like every read.
import { APIError, get, query, gvrPath } from './api.js';
import { $, el } from './dom.js';
import { age, toYAML } from './format.js';
import { changeSummary, hunks, lineDiff } from './diff.js';

// The console's shared state and error banner (app.js).
let host = { showError: () => {}, kinds: () => new Map(), clusters: () => [] };
export function initHistory(h) { host = h; }

const SINCE = [['15m', 15 * 60e3], ['1h', 3600e3], ['6h', 6 * 3600e3], ['24h', 24 * 3600e3]];
// A timeline reads at most this many revisions (pages of 100).
const MAX_REVISIONS = 1000;

export function objectLink(cluster, group, version, resource, ns, name) {
  return '#/object/' + [cluster, group || 'core', version, resource, ns || '-', name].map(encodeURIComponent).join('/');
}

function entryLink(e) { return objectLink(e.cluster, e.group, e.version, e.resource, e.namespace, e.name); }

// kindOf names an entry's kind: its own, else the inventory's for its
// resource, else the resource.
function kindOf(e) {
  return e.kind || host.kinds().get(gvrPath(e))?.kind || e.resource;
}

function who(e) {
  if (!e.manager) return '—';
  return e.manager + (e.operation ? ` (${e.operation}${e.subresource ? ' ' + e.subresource : ''})` : '');
}

function when(ts) {
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) ? ts : d.toISOString().replace('.000Z', 'Z');
}

// ---- an object's timeline ------------------------------------------------------

// loadTimeline shows an object's revisions, newest first, each with its
// time, manager, what changed and its diff with the one before (the
// newest one open). With gone (the object is not in the cache: deleted),
// the last revision's state fills the YAML.
export async function loadTimeline(gvr, namespace, name, cluster, signal, gone) {
  const list = $('obj-history'), note = $('obj-history-note');
  list.replaceChildren();
  note.textContent = 'loading…';
  const revs = [];
  let cont = '';
  try {
    do {
      const res = await get(`/v1/revisions/${gvrPath(gvr)}/${encodeURIComponent(name)}${query({ namespace, cluster, limit: 100, continue: cont })}`, signal);
      revs.push(...(res.revisions || []));
      cont = res.continue || '';
    } while (cont && revs.length < MAX_REVISIONS);
  } catch (e) {
    if (e.name === 'AbortError') return;
    note.textContent = 'History unavailable: ' + e.message;
    if (gone) host.showError(e);
    return;
  }
  note.textContent = `${revs.length} revision${revs.length === 1 ? '' : 's'} in the window` + (cont ? ' (the oldest not shown)' : '');
  if (gone && revs.length) {
    const last = revs[revs.length - 1];
    $('obj-title').classList.add('bad');
    $('obj-title').textContent += ' (deleted)';
    if (last.object) $('obj-yaml').textContent = toYAML(last.object);
  }
  const items = revs.map((e, i) => timelineItem(e, i > 0 ? revs[i - 1] : null, i + 1));
  items.reverse();
  list.replaceChildren(...items);
  const first = list.querySelector('details');
  if (first) first.open = true;
}

function timelineItem(e, prev, n) {
  const det = el('details', { class: 'rev', 'data-rev': String(n) });
  const sum = el('summary');
  sum.append(
    el('span', { class: 'rev-n', text: '#' + n }),
    el('span', { class: 'type ' + e.type, text: e.type }),
    el('time', { datetime: e.time, title: when(e.time), text: when(e.time) }),
    el('span', { class: 'who', text: who(e) }),
    el('span', { class: 'muted', text: 'rv ' + (e.resourceVersion || '—') }),
    el('span', { class: 'paths', text: changeSummary(e, 4, prev) }));
  det.append(sum);
  // The diff is built when opened: a long timeline costs nothing until read.
  det.addEventListener('toggle', () => {
    if (!det.open || det.dataset.built) return;
    det.dataset.built = '1';
    det.append(diffBlock(prev, e));
    if (e.patch) det.append(el('div', { class: 'muted', text: 'merge patch from the previous revision:' }), el('pre', { class: 'yaml patch', text: toYAML(e.patch) }));
  });
  return det;
}

function diffBlock(prev, e) {
  const pre = el('pre', { class: 'diff', tabindex: '0' });
  if (!e.object) { pre.textContent = 'This revision carries no object.'; return pre; }
  const a = prev && prev.object ? toYAML(prev.object) : '';
  const ops = hunks(lineDiff(a, toYAML(e.object)));
  if (!ops.length) { pre.textContent = 'No change in the object.'; return pre; }
  pre.append(...ops.map(([op, line]) => el('span', { class: op === '+' ? 'add' : op === '-' ? 'del' : op === '@' ? 'hunk' : '', text: (op === '@' ? '' : op) + line + '\n' })));
  return pre;
}

// ---- the change feeds: recent changes and recently deleted ------------------------

const FEEDS = {
  changes: { form: 'ch', table: 'changes', deleted: false },
  deleted: { form: 'del', table: 'deleted', deleted: true },
};
const feedState = { changes: null, deleted: null };

// fillFilters puts the inventory's clusters and kinds in a feed's form.
function fillFilters(f, p) {
  const cl = $(f + '-cluster');
  cl.replaceChildren(el('option', { value: '', text: 'all clusters' }), ...host.clusters().map((c) => el('option', { value: c.name, text: c.name })));
  const kinds = [...host.kinds().values()].sort((a, b) => a.kind.localeCompare(b.kind));
  $(f + '-kind').replaceChildren(el('option', { value: '', text: 'all kinds' }),
    ...kinds.map((k) => el('option', { value: k.gvr.resource + (k.gvr.group ? '.' + k.gvr.group : ''), text: k.kind + (k.gvr.group ? '.' + k.gvr.group : '') })));
  const since = $(f + '-since');
  since.replaceChildren(...SINCE.map(([s]) => el('option', { value: s, text: 'last ' + s })));
  for (const [k, id] of [['cluster', '-cluster'], ['kind', '-kind'], ['ns', '-ns'], ['type', '-type']]) {
    const e = $(f + id);
    if (!e) continue;
    if (p[k] && e.tagName === 'SELECT' && ![...e.options].some((o) => o.value === p[k])) e.append(el('option', { value: p[k], text: p[k] }));
    e.value = p[k] || '';
  }
  since.value = p.since || '1h';
}

export function feedParams(view) {
  const f = FEEDS[view].form, p = {};
  for (const [k, id] of [['since', '-since'], ['cluster', '-cluster'], ['kind', '-kind'], ['ns', '-ns'], ['type', '-type']]) {
    const e = $(f + id);
    if (e && e.value.trim()) p[k] = e.value.trim();
  }
  // The page size has no control (50); a link may set it.
  const cur = feedState[view];
  if (cur && cur.p.limit) p.limit = cur.p.limit;
  return p;
}

// showFeed opens a feed view at its first page.
export function showFeed(view, p) {
  fillFilters(FEEDS[view].form, p);
  runFeed(view, p, 0, ['']);
}

export function pageFeed(view, delta) {
  const s = feedState[view];
  if (!s) return;
  const i = s.pageIndex + delta;
  if (i < 0 || (delta > 0 && !s.tokens[i])) return;
  runFeed(view, s.p, i, s.tokens);
}

async function runFeed(view, p, pageIndex, tokens) {
  const cfg = FEEDS[view], f = cfg.form;
  if (feedState[view]) feedState[view].ctrl.abort();
  const s = { p, pageIndex, tokens, ctrl: new AbortController() };
  feedState[view] = s;
  const ms = (SINCE.find(([k]) => k === (p.since || '1h')) || SINCE[1])[1];
  const q = {
    since: new Date(Date.now() - ms).toISOString(), clusters: p.cluster, namespace: p.ns, resources: p.kind,
    // Objects bring each change's patch too: the "Changed" column.
    types: cfg.deleted ? 'DELETED' : p.type, objects: true, limit: Number(p.limit) || 50, continue: tokens[pageIndex],
  };
  // A page's since is fixed by its first page: the continue token holds it.
  if (pageIndex > 0 && s.tokens.since) q.since = s.tokens.since;
  else s.tokens.since = q.since;
  let res;
  try {
    res = await get('/v1/changes' + query(q), s.ctrl.signal);
  } catch (e) {
    if (e.name === 'AbortError') return;
    renderFeed(view, s, []);
    host.showError(e instanceof APIError ? e : new Error(String(e)));
    return;
  }
  if (feedState[view] !== s) return;
  host.showError(null);
  s.tokens[pageIndex + 1] = res.continue || '';
  renderFeed(view, s, res.changes || []);
  $(f + '-pageinfo').textContent = (res.changes || []).length ? `page ${pageIndex + 1}` : 'no changes';
}

function renderFeed(view, s, entries) {
  const cfg = FEEDS[view];
  const tbody = $(cfg.table).tBodies[0];
  const rows = [];
  for (const e of entries) {
    const link = el('a', { href: entryLink(e), text: e.name });
    const cells = [
      el('td', {}, el('time', { datetime: e.time, title: when(e.time), text: age(e.time) + ' ago' })),
      el('td', { text: e.cluster }),
    ];
    if (!cfg.deleted) cells.push(el('td', { class: 'type ' + e.type, text: e.type }));
    cells.push(el('td', { text: kindOf(e) }), el('td', { text: e.namespace || '' }), el('td', {}, link), el('td', { class: 'who', text: who(e) }));
    const tr = el('tr', { 'data-key': `${e.cluster}/${e.namespace || ''}/${e.name}` }, ...cells);
    if (cfg.deleted) {
      const btn = el('button', { type: 'button', class: 'show-last', text: 'Last state' });
      btn.addEventListener('click', () => showLast(e));
      tr.append(el('td', {}, btn));
    } else {
      // A feed entry has a patch unless its revision is a full snapshot.
      tr.append(el('td', { class: 'paths', text: e.patch || e.type !== 'MODIFIED' ? changeSummary(e) : '' }));
    }
    rows.push(tr);
  }
  if (!rows.length) rows.push(el('tr', {}, el('td', { colspan: '8', class: 'muted', text: cfg.deleted ? 'Nothing deleted in this window.' : 'No changes in this window.' })));
  tbody.replaceChildren(...rows);
  $(cfg.form + '-prev').disabled = s.pageIndex === 0;
  $(cfg.form + '-next').disabled = !s.tokens[s.pageIndex + 1];
  if (cfg.deleted) { $('del-last').hidden = true; }
}

function showLast(e) {
  const box = $('del-last');
  $('del-last-title').textContent = `${e.cluster} · ${kindOf(e)} ${e.namespace ? e.namespace + '/' : ''}${e.name} — last state, deleted ${when(e.time)}`;
  $('del-last-yaml').textContent = e.object ? toYAML(e.object) : 'The hub holds no state of this object.';
  box.hidden = false;
  box.scrollIntoView({ block: 'nearest' });
}
