// The fleet view: each cluster's readiness, sync state and authorization,
// and the registries, from /v1/clusters and /v1/registries.
import { get } from './api.js';
import { $, el } from './dom.js';
import { age } from './format.js';

// The console's error banner, search watches and inventory (app.js).
let host = { showError: () => {}, stopSearchWatches: () => {}, applyInventory: () => {} };
export function initFleet(h) { host = h; }

// The inventory has no watch API: the fleet view refreshes on demand and
// every 10 s while it is open.
let fleetTimer = 0;
export async function loadFleet() {
  clearTimeout(fleetTimer);
  host.stopSearchWatches();
  try {
    const [cl, rg] = await Promise.all([get('/v1/clusters'), get('/v1/registries')]);
    host.showError(null);
    host.applyInventory(cl.clusters || []);
    renderClusters(cl.clusters || []);
    renderRegistries(rg.registries || []);
  } catch (e) { host.showError(e); }
  if (!$('view-fleet').hidden) fleetTimer = setTimeout(() => { if (!$('view-fleet').hidden) loadFleet(); }, 10000);
}

function renderClusters(clusters) {
  const tbody = $('clusters').tBodies[0];
  const rows = [];
  for (const c of clusters) {
    const synced = c.cacheSynced;
    const res = c.resources || [];
    const det = el('details');
    det.append(el('summary', { text: c.name }));
    const t = el('table', { class: 'sync' });
    for (const r of res) {
      t.append(el('tr', {}, el('td', { text: r.kind || r.gvr.resource }), el('td', { text: r.synced ? 'synced' : 'syncing', class: r.synced ? 'ok' : 'warn' }),
        el('td', { text: String(r.objectCount || 0) }), el('td', { text: r.message || '', class: 'muted' })));
    }
    det.append(t);
    rows.push(el('tr', { 'data-cluster': c.name },
      el('td', {}, det),
      // Why a cluster is not ready (its collector's message: the member
      // apiserver unreachable, the collector stopped) is shown, not hidden
      // in a tooltip: on-call reads it at a glance.
      el('td', { class: c.ready ? 'ok' : 'bad' }, c.ready ? 'Ready' : 'NotReady',
        ...(!c.ready && c.message ? [el('div', { class: 'why', text: c.message })] : [])),
      el('td', { text: synced ? 'synced' : 'syncing', class: synced ? 'ok' : 'warn' }),
      el('td', { text: c.lastHeartbeat ? age(c.lastHeartbeat) + ' ago' : 'never' }),
      el('td', { text: String(c.objectCount || 0) }),
      el('td', { text: String(c.lag || 0), class: Number(c.lag || 0) > 0 ? 'warn' : '' }),
      el('td', { text: c.kubernetesVersion || '' }),
      authorizationCell(c.authorization),
      el('td', { class: 'labels' }, ...Object.entries(c.labels || {}).map(([k, v]) => el('span', { class: 'lbl', text: `${k}=${v}` })))));
  }
  if (!rows.length) rows.push(el('tr', {}, el('td', { colspan: '9', class: 'muted', text: 'No clusters registered.' })));
  tbody.replaceChildren(...rows);
}

// What the member's authorizers let fleetview know (its collector's
// SelfSubjectRulesReview): member RBAC mirrors RBAC alone, so a member
// with a webhook too may allow more than fleetview shows.
function authorizationCell(a) {
  if (a === 'rbac') return el('td', { text: 'RBAC', title: 'every authorizer of the member lists its rules' });
  if (a === 'rbac-and-others') return el('td', { class: 'warn', text: 'RBAC + others', title: 'RBAC mirrored, other authorizers (a webhook) not: the member may allow more than fleetview shows' });
  return el('td', { class: 'muted', text: 'unknown' });
}

function renderRegistries(regs) {
  const tbody = $('registries').tBodies[0];
  const rows = regs.map((x) => {
    const r = x.registry || x;
    const sels = ((r.spec && r.spec.resourceSelectors) || []).map((s) => s.kind).join(', ');
    const conds = ((r.status && r.status.conditions) || []).map((c) => el('span', { class: 'lbl ' + condClass(c), title: c.message || '', text: `${c.type}=${c.status}${c.reason ? ' (' + c.reason + ')' : ''}` }));
    return el('tr', {}, el('td', { text: (r.metadata && r.metadata.name) || '' }), el('td', { text: sels }), el('td', { class: 'labels' }, ...conds));
  });
  if (!rows.length) rows.push(el('tr', {}, el('td', { colspan: '3', class: 'muted', text: 'No registries.' })));
  tbody.replaceChildren(...rows);
}

// A False condition is a failure unless it states an expected choice
// (SecretData=False: Secrets are cached without data, as by default).
function condClass(c) {
  if (c.status === 'True') return 'ok';
  return c.type === 'SecretData' ? 'muted' : 'bad';
}

