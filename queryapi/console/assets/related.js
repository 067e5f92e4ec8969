// Related objects of the object view, from /v1/related: a tree rooted at
// the object, each related object placed once, under the object it was
// reached from, saying how they relate ("owned by", "selects", ...).
// The server answers only what the token may read, so the tree holds
// nothing else.
import { get, query, gvrPath } from './api.js';

const $ = (id) => document.getElementById(id);

function el(tag, props = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'text') e.textContent = v; else e.setAttribute(k, v);
  }
  e.append(...kids);
  return e;
}

// How an edge reads from the node at its from end, and from its to end.
const WORDS = {
  owner: ['owned by', 'owns'],
  selects: ['selects', 'selected by'],
  references: ['references', 'referenced by'],
  copy: ['copy in', 'copy of'],
};

function nodeHref(n) {
  return '#/object/' + [n.cluster, n.group || 'core', n.version, n.resource, n.namespace || '-', n.name].map(encodeURIComponent).join('/');
}

function nodeLabel(n, from) {
  const what = `${n.kind || n.resource}/${n.name}`;
  const where = n.cluster !== from.cluster ? ` · ${n.cluster}` : '';
  const kids = [];
  if (n.cached) kids.push(el('a', { href: nodeHref(n), text: what + where }));
  else kids.push(el('span', { text: what + where }), el('span', { class: 'muted', text: ' (not cached)' }));
  return kids;
}

// tree builds the nested list: breadth first from the root over edges
// either way, so each node sits under the first node that reached it.
export function relatedTree(resp) {
  const nodes = new Map((resp.nodes || []).map((n) => [n.id, n]));
  const root = (resp.nodes || [])[0];
  if (!root) return el('p', { class: 'muted', text: 'No related objects.' });
  const adj = new Map();
  for (const e of resp.edges || []) {
    if (!adj.has(e.from)) adj.set(e.from, []);
    if (!adj.has(e.to)) adj.set(e.to, []);
    adj.get(e.from).push([e.to, WORDS[e.type]?.[0] || e.type, e.type]);
    adj.get(e.to).push([e.from, WORDS[e.type]?.[1] || e.type, e.type]);
  }
  const placed = new Set([root.id]);
  const lists = new Map([[root.id, el('ul', { class: 'rel-tree' })]]);
  let frontier = [root.id];
  while (frontier.length) {
    const next = [];
    for (const id of frontier) {
      for (const [other, word, type] of adj.get(id) || []) {
        if (placed.has(other) || !nodes.has(other)) continue;
        placed.add(other);
        const n = nodes.get(other);
        const ul = el('ul');
        lists.set(other, ul);
        lists.get(id).append(el('li', { 'data-edge': type, 'data-node': other }, el('span', { class: 'rel-word', text: word + ' ' }), ...nodeLabel(n, nodes.get(id)), ul));
        next.push(other);
      }
    }
    frontier = next;
  }
  const top = lists.get(root.id);
  if (!top.children.length) return el('p', { class: 'muted', text: 'No related objects.' });
  return top;
}

// showRelated fills #obj-related for the object, depth 2.
export async function showRelated(gvr, namespace, name, cluster, signal) {
  const box = $('obj-related');
  box.replaceChildren(el('span', { class: 'muted', text: 'Related objects: loading…' }));
  try {
    const resp = await get(`/v1/related/${gvrPath(gvr)}/${encodeURIComponent(name)}${query({ namespace, cluster, depth: 2 })}`, signal);
    box.replaceChildren(el('h2', { text: 'Related' }), relatedTree(resp));
    if (resp.truncated) box.append(el('p', { class: 'muted', text: 'More related objects than shown.' }));
  } catch (e) {
    if (e.name !== 'AbortError') box.replaceChildren(el('span', { class: 'muted', text: 'Related objects unknown: ' + e.message }));
  }
}
