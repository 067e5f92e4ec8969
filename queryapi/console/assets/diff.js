// Pure helpers of the history views (no DOM, no API): a line diff of two
// revisions' YAML and the field paths a JSON merge patch sets. Kept apart
// so they can be read and tested on their own.

// lineDiff diffs two texts line by line: a list of [op, line] with op ' '
// (both), '-' (only in a) or '+' (only in b). The common head and tail are
// taken off first (a revision changes a few lines of an object), then the
// middle is diffed by longest common subsequence; a middle too large for
// that (MAX_CELLS) is shown as removed then added.
const MAX_CELLS = 4e6;
export function lineDiff(a, b) {
  const x = a ? a.replace(/\n$/, '').split('\n') : [];
  const y = b ? b.replace(/\n$/, '').split('\n') : [];
  let head = 0;
  while (head < x.length && head < y.length && x[head] === y[head]) head++;
  let tail = 0;
  while (tail < x.length - head && tail < y.length - head && x[x.length - 1 - tail] === y[y.length - 1 - tail]) tail++;
  const xs = x.slice(head, x.length - tail), ys = y.slice(head, y.length - tail);
  const out = x.slice(0, head).map((l) => [' ', l]);
  if (xs.length * ys.length > MAX_CELLS) {
    out.push(...xs.map((l) => ['-', l]), ...ys.map((l) => ['+', l]));
  } else {
    out.push(...lcsDiff(xs, ys));
  }
  out.push(...x.slice(x.length - tail).map((l) => [' ', l]));
  return out;
}

function lcsDiff(xs, ys) {
  const n = xs.length, m = ys.length;
  // len[i][j]: the LCS of xs[i:] and ys[j:], one flat array.
  const len = new Uint32Array((n + 1) * (m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      len[i * (m + 1) + j] = xs[i] === ys[j] ? len[(i + 1) * (m + 1) + j + 1] + 1 : Math.max(len[(i + 1) * (m + 1) + j], len[i * (m + 1) + j + 1]);
    }
  }
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (xs[i] === ys[j]) { out.push([' ', xs[i]]); i++; j++; }
    else if (len[(i + 1) * (m + 1) + j] >= len[i * (m + 1) + j + 1]) out.push(['-', xs[i++]]);
    else out.push(['+', ys[j++]]);
  }
  while (i < n) out.push(['-', xs[i++]]);
  while (j < m) out.push(['+', ys[j++]]);
  return out;
}

// hunks keeps the changed lines with `context` lines around them, as a
// unified diff does: a list of [op, line] where op '@' is a hunk header
// ("@@ -a,n +b,m @@").
export function hunks(ops, context = 3) {
  const keep = new Array(ops.length).fill(false);
  ops.forEach(([op], i) => {
    if (op === ' ') return;
    for (let k = Math.max(0, i - context); k <= Math.min(ops.length - 1, i + context); k++) keep[k] = true;
  });
  const out = [];
  let a = 1, b = 1, i = 0;
  while (i < ops.length) {
    if (!keep[i]) { if (ops[i][0] !== '+') a++; if (ops[i][0] !== '-') b++; i++; continue; }
    let j = i, na = 0, nb = 0;
    while (j < ops.length && keep[j]) { if (ops[j][0] !== '+') na++; if (ops[j][0] !== '-') nb++; j++; }
    out.push(['@', `@@ -${a},${na} +${b},${nb} @@`], ...ops.slice(i, j));
    a += na; b += nb; i = j;
  }
  return out;
}

// QUIET change with every revision and are shown elsewhere.
const QUIET = ['metadata.resourceVersion', 'metadata.managedFields'];

// patchPaths lists the field paths a JSON merge patch (RFC 7386) sets,
// sorted, "-" before a removed one; a key with "." or "/" is bracketed.
export function patchPaths(patch) {
  const out = [];
  const walk = (v, prefix) => {
    if (v === null) { out.push('-' + prefix); return; }
    if (typeof v !== 'object' || Array.isArray(v) || (prefix && !Object.keys(v).length)) { out.push(prefix); return; }
    for (const [k, x] of Object.entries(v)) {
      walk(x, prefix + (/[./]/.test(k) ? `[${k}]` : (prefix ? '.' : '') + k));
    }
  };
  if (patch && typeof patch === 'object') walk(patch, '');
  return out.filter((p) => !QUIET.includes(p.replace(/^-/, ''))).sort();
}

// mergePatch is the JSON merge patch (RFC 7386) from a to b: what a
// revision stored as a full snapshot changed, from its predecessor.
export function mergePatch(a, b) {
  const obj = (v) => v && typeof v === 'object' && !Array.isArray(v);
  if (!obj(a) || !obj(b)) return JSON.stringify(a) === JSON.stringify(b) ? undefined : b;
  const out = {};
  for (const k of Object.keys(a)) if (!(k in b)) out[k] = null;
  for (const [k, v] of Object.entries(b)) {
    if (!(k in a)) { out[k] = v; continue; }
    const d = mergePatch(a[k], v);
    if (d !== undefined && !(obj(d) && !Object.keys(d).length && obj(v))) out[k] = d;
  }
  return out;
}

// changeSummary is one line saying what a change did; prev, when known,
// stands in for a missing patch (a revision stored as a snapshot).
export function changeSummary(e, max = 4, prev = null) {
  if (e.type === 'ADDED') return 'created';
  if (e.type === 'DELETED') return 'deleted';
  let patch = e.patch;
  if (!patch && prev && prev.object && e.object) patch = mergePatch(prev.object, e.object);
  if (!patch) return prev ? '' : '(no earlier revision in the window)';
  const p = patchPaths(patch);
  if (!p.length) return '(resourceVersion only)';
  return p.length > max ? p.slice(0, max).join(', ') + `, +${p.length - max} more` : p.join(', ');
}
