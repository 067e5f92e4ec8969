// The public REST API with the user's bearer token. Nothing else is
// called: the console sees exactly what the token may read.

const TOKEN_KEY = 'fleetview.token';

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(t) { if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY); }

// APIError is a non-2xx answer (status and the Status body's message) or,
// with status 0, a request that never got an answer (backend down).
export class APIError extends Error {
  constructor(status, message, reason) {
    super(message);
    this.status = status;
    this.reason = reason || '';
  }
}

function headers() {
  const h = { Accept: 'application/json' };
  const t = token();
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

async function errorOf(resp) {
  let msg = resp.statusText, reason = '';
  try {
    const body = await resp.json();
    msg = body.message || msg;
    reason = body.reason || '';
  } catch { /* not JSON: keep the status text */ }
  return new APIError(resp.status, msg, reason);
}

export async function get(path, signal) {
  let resp;
  try {
    resp = await fetch(path, { headers: headers(), signal, cache: 'no-store' });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new APIError(0, 'fleetview is not reachable: ' + e.message);
  }
  if (!resp.ok) throw await errorOf(resp);
  return resp.json();
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === '') continue;
    if (Array.isArray(v)) v.forEach((x) => q.append(k, x)); else q.set(k, String(v));
  }
  const s = q.toString();
  return s ? '?' + s : '';
}

export function gvrPath(g) { return `${g.group || 'core'}/${g.version}/${g.resource}`; }

// watch streams newline-delimited JSON events from /v1/watch with fetch
// (EventSource cannot send the Authorization header). onEvent gets each
// event; the promise ends when the stream does (abort with signal).
//
// The watch asks for bookmarks (every 10 s by default), so a stream silent
// for STALL_MS is half-open (a hub gone without closing it): it is ended
// as unreachable, and the caller reconnects or reports it.
const STALL_MS = 30000;
export async function watch(gvr, params, onEvent, signal) {
  const stall = new AbortController();
  let stalled = false;
  let timer = 0;
  const arm = () => { clearTimeout(timer); timer = setTimeout(() => { stalled = true; stall.abort(); }, STALL_MS); };
  arm();
  try {
    return await stream(gvr, { ...params, allowBookmarks: true }, onEvent, AbortSignal.any([signal, stall.signal]), arm);
  } catch (e) {
    if (signal.aborted) return; // the caller ended it
    if (stalled) throw new APIError(0, 'watch: no data from fleetview for ' + STALL_MS / 1000 + ' s');
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

async function stream(gvr, params, onEvent, signal, alive) {
  let resp;
  try {
    resp = await fetch(`/v1/watch/${gvrPath(gvr)}${query(params)}`, { headers: headers(), signal, cache: 'no-store' });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new APIError(0, 'watch: fleetview is not reachable: ' + e.message);
  }
  if (!resp.ok) throw await errorOf(resp);
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      alive();
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (!line.trim()) continue;
        const ev = JSON.parse(line);
        if (ev.type === 'ERROR') throw new APIError(ev.object && ev.object.code || 500, (ev.object && ev.object.message) || 'watch error', ev.object && ev.object.reason);
        onEvent(ev);
      }
    }
  } catch (e) {
    if (e.name === 'AbortError' && !signal.aborted) throw new APIError(0, 'watch: connection lost');
    throw e;
  }
}
