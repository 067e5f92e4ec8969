// Counts from /v1/counts: the search filters show how many objects each
// choice selects ("prod-eu (1,204)"), and the counts panel groups the
// current selection by a chosen dimension. One request per filter, not
// one per cluster; the server counts only what the token may list.
import { get, query, gvrPath } from './api.js';

const $ = (id) => document.getElementById(id);
const fmt = new Intl.NumberFormat('en-US');

// withCount labels an option with its count, keeping its own text.
function withCount(opt, n) {
  if (!opt.dataset.label) opt.dataset.label = opt.textContent;
  opt.textContent = n === undefined ? opt.dataset.label : `${opt.dataset.label} (${fmt.format(n)})`;
}

async function count(gvr, sel, by, signal) {
  return get(`/v1/counts/${gvrPath(gvr)}${query({ ...sel, by })}`, signal);
}

// filterCounts labels the cluster picker, the namespace suggestions and
// the kind picker with the counts of the selection s (a kind list: its
// resource, namespace, cluster selector and label terms).
export async function filterCounts(kinds, s) {
  const sel = { namespace: s.p.ns, clusterSelector: s.p.csel, labelSelector: s.terms.join(',') };
  const signal = s.ctrl.signal;
  try {
    const byCluster = await count(s.gvr, sel, ['cluster'], signal);
    const per = new Map((byCluster.rows || []).map((r) => [r.values[0], Number(r.count)]));
    for (const o of $('cluster').options) withCount(o, o.value ? (per.get(o.value) || 0) : Number(byCluster.total || 0));
    const byNS = await count(s.gvr, { ...sel, namespace: '', clusters: s.p.cluster }, ['namespace'], signal);
    const list = $('ns-counts');
    list.replaceChildren(...(byNS.rows || []).filter((r) => r.values[0]).map((r) => {
      const o = document.createElement('option');
      o.value = r.values[0];
      o.label = `${r.values[0]} (${fmt.format(Number(r.count))})`;
      return o;
    }));
    // The kind picker: each kind's total under the same filters (at most
    // 50 kinds: one request each).
    const opts = [...$('kind').options].filter((o) => o.value && kinds.has(o.value)).slice(0, 50);
    await Promise.all(opts.map(async (o) => {
      try {
        const r = await count(kinds.get(o.value).gvr, { ...sel, clusters: s.p.cluster }, [], signal);
        withCount(o, Number(r.total || 0));
      } catch (e) {
        if (e.name === 'AbortError') throw e;
        withCount(o, undefined); // a kind the token may not list: no count
      }
    }));
  } catch (e) {
    if (e.name !== 'AbortError') $('count-panel').dataset.error = e.message;
  }
}

// countPanel groups the selection s by the panel's dimension.
export async function countPanel(s) {
  const by = $('count-by').value === 'custom' ? $('count-dim').value.trim() : $('count-by').value;
  const body = $('count-table').tBodies[0];
  const status = $('count-status');
  if (!s || !s.gvr || !by) { body.replaceChildren(); status.textContent = ''; return; }
  const sel = { namespace: s.p.ns, clusters: s.p.cluster, clusterSelector: s.p.csel, labelSelector: s.terms.join(',') };
  try {
    const r = await count(s.gvr, sel, [by], s.ctrl.signal);
    const rows = (r.rows || []).slice().sort((a, b) => Number(b.count) - Number(a.count));
    body.replaceChildren(...rows.map((row) => {
      const tr = document.createElement('tr');
      const v = document.createElement('td');
      v.textContent = row.values[0] === '' ? '(none)' : row.values[0];
      const n = document.createElement('td');
      n.textContent = fmt.format(Number(row.count));
      n.className = 'num';
      tr.append(v, n);
      return tr;
    }));
    status.textContent = `${fmt.format(Number(r.total || 0))} ${gvrPath(s.gvr).split('/')[2]} by ${by}${r.scanned === 'objects' ? ' (read from the objects)' : ''}`;
  } catch (e) {
    if (e.name === 'AbortError') return;
    body.replaceChildren();
    status.textContent = e.message;
  }
}
