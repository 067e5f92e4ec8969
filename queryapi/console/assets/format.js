// Pure formatting helpers (no DOM, no API): query parsing, status, age,
// YAML. Kept apart so they can be read and tested on their own.

// labelTerms splits the search box into free text and key=value label
// terms (=, ==, !=), as kubectl's -l takes them.
export function labelTerms(input) {
  const terms = [], words = [];
  for (const tok of input.trim().split(/\s+/)) {
    if (!tok) continue;
    if (/^[A-Za-z0-9][A-Za-z0-9._/-]*(=|==|!=)[A-Za-z0-9._-]*$/.test(tok)) terms.push(tok); else words.push(tok);
  }
  return { text: words.join(' '), terms };
}

// age renders the time since an RFC 3339 timestamp as kubectl does (5m, 3h, 2d).
export function age(ts, now = Date.now()) {
  if (!ts) return '';
  const s = Math.max(0, Math.floor((now - Date.parse(ts)) / 1000));
  if (Number.isNaN(s)) return '';
  if (s < 120) return s + 's';
  if (s < 7200) return Math.floor(s / 60) + 'm';
  if (s < 172800) return Math.floor(s / 3600) + 'h';
  return Math.floor(s / 86400) + 'd';
}

// objectStatus is a one-word status and a CSS class for any object; kind
// is given for list items, which may not carry their own.
export function objectStatus(o, kind = o.kind) {
  const st = o.status || {}, spec = o.spec || {}, m = o.metadata || {};
  if (m.deletionTimestamp) return { text: 'Terminating', cls: 'warn' };
  switch (kind) {
    case 'Pod': {
      for (const c of st.containerStatuses || []) {
        const w = c.state && c.state.waiting;
        if (w && w.reason) return { text: w.reason, cls: 'bad' };
      }
      const ph = st.phase || 'Pending';
      return { text: ph, cls: ph === 'Running' || ph === 'Succeeded' ? 'ok' : ph === 'Pending' ? 'warn' : 'bad' };
    }
    case 'Deployment': case 'StatefulSet': case 'ReplicaSet': {
      const want = spec.replicas ?? 1, ready = st.readyReplicas || 0;
      return { text: `${ready}/${want} ready`, cls: ready >= want ? 'ok' : 'warn' };
    }
    case 'DaemonSet': {
      const want = st.desiredNumberScheduled || 0, ready = st.numberReady || 0;
      return { text: `${ready}/${want} ready`, cls: ready >= want ? 'ok' : 'warn' };
    }
    default:
  }
  for (const c of st.conditions || []) {
    if (c.type === 'Ready' || c.type === 'Available') return { text: c.type + '=' + c.status, cls: c.status === 'True' ? 'ok' : 'bad' };
  }
  if (st.phase) return { text: st.phase, cls: '' };
  return { text: '', cls: '' };
}

// toYAML writes JSON data as YAML (block style; strings quoted when YAML
// would read them as something else).
export function toYAML(v) { return emit(v, 0).replace(/^\n/, '') + '\n'; }

function scalar(v) {
  if (v === null) return 'null';
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  const s = String(v);
  if (s === '' || /^[\s]|[\s]$|^[-?:,[\]{}#&*!|>'"%@`~]|: | #|\n|^(true|false|null|yes|no|on|off|~)$|^[-+]?[0-9.]/i.test(s)) return JSON.stringify(s);
  return s;
}

function emit(v, indent) {
  const pad = '  '.repeat(indent);
  if (Array.isArray(v)) {
    if (!v.length) return ' []';
    return v.map((x) => {
      if (x && typeof x === 'object' && !Array.isArray(x) && Object.keys(x).length) {
        const inner = emit(x, indent + 1).replace(/^\n\s*/, '');
        return '\n' + pad + '- ' + inner;
      }
      return '\n' + pad + '-' + (x && typeof x === 'object' ? emit(x, indent + 1) : ' ' + scalar(x));
    }).join('');
  }
  if (v && typeof v === 'object') {
    const keys = Object.keys(v);
    if (!keys.length) return ' {}';
    return keys.map((k) => {
      const x = v[k];
      return '\n' + pad + scalar(k) + ':' + (x && typeof x === 'object' ? emit(x, indent + 1) : ' ' + scalar(x));
    }).join('');
  }
  return ' ' + scalar(v);
}
