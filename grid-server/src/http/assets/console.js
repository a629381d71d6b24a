// The Grid console (docs/console.md). Everything it shows comes from the
// public API, asked with the key (or sign-in token) the person gives: it lives in this
// closure's `key` only (never a cookie, never a URL, never storage), so a
// reload or a closed tab forgets it. No framework and no chart library: the
// page is a few tables, a stacked bar chart drawn as SVG, and polling.
(() => {
  'use strict';

  let key = null;
  const POLL_MS = 1500;
  const ACCOUNT_POLL_MS = 5000;
  const THUMB_MS = 4000;
  const LEDGER_PAGE = 10;
  const CHART_PAGES = 5; // ledger pages of 100 charges the chart reads
  const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'TIMED_OUT', 'CANCELLED']);

  const $ = (id) => document.getElementById(id);

  // An element with attributes and children (text or nodes); data is always
  // set as text, never parsed as HTML.
  function h(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children) {
      if (c !== null && c !== undefined) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  // The credential as a bearer token: an API key (`grid_...`) or a sign-in
  // token of a grid with sign-in, which the API takes only this way.
  const auth = () => ({ authorization: `Bearer ${key}` });

  class ApiFailure extends Error {
    constructor(status, error) {
      super(`${status} ${error}`);
      this.status = status;
      this.error = error;
    }
  }

  // One call of the API with the key; its JSON (null for 204).
  async function api(path, { method = 'GET', body } = {}) {
    const headers = auth();
    if (body !== undefined) headers['content-type'] = 'application/json';
    const r = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      credentials: 'omit',
      referrerPolicy: 'no-referrer',
    });
    if (r.status === 204) return null;
    const text = await r.text();
    let json = null;
    try { json = JSON.parse(text); } catch (_) { json = null; }
    if (!r.ok) throw new ApiFailure(r.status, (json && json.error) || text.slice(0, 200));
    return json;
  }

  const status = (text) => { $('status').textContent = text; };
  const euros = (micros) => `${(micros / 1e6).toFixed(micros % 10000 === 0 ? 2 : 6)} €`;
  const when = (iso) => (iso ? new Date(iso).toLocaleString() : '–');
  const cell = (text, cls) => h('td', { class: cls, text: text ?? '–' });
  const replaceRows = (tbody, rows) => tbody.replaceChildren(...rows);

  // What a ledger subject is for, by its id's prefix.
  function kindOf(subject) {
    if (!subject) return null;
    if (subject.startsWith('it_') || subject.startsWith('bt_')) return 'captures';
    if (subject.startsWith('cj_')) return 'jobs';
    if (subject.startsWith('ses_')) return 'sessions';
    return null;
  }
  const KINDS = ['captures', 'jobs', 'sessions'];

  // ---- views -------------------------------------------------------------

  let view = 'account';
  const refreshers = {};
  let lastAccount = 0;

  function show(name) {
    view = name;
    for (const b of document.querySelectorAll('#views button')) {
      if (b.dataset.view === name) b.setAttribute('aria-current', 'page');
      else b.removeAttribute('aria-current');
    }
    for (const s of document.querySelectorAll('.view')) s.hidden = s.id !== `view-${name}`;
    lastAccount = 0;
    tick();
  }

  let busy = false;
  async function tick() {
    if (!key || busy) return;
    busy = true;
    try {
      await refreshers[view]();
    } catch (e) {
      status(e instanceof ApiFailure ? `The API answered ${e.status}: ${e.error}` : `The grid did not answer: ${e.message}`);
    } finally {
      busy = false;
    }
  }

  // ---- account -----------------------------------------------------------

  const ledger = { cursors: [null], page: 0, next: null };

  refreshers.account = async () => {
    if (Date.now() - lastAccount < ACCOUNT_POLL_MS) return;
    lastAccount = Date.now();
    const cursor = ledger.cursors[ledger.page];
    const q = `?limit=${LEDGER_PAGE}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
    const a = await api(`/account${q}`);
    $('acc-credit').textContent = euros(a.creditMicros);
    $('acc-reserved').textContent = euros(a.reservedMicros);
    $('acc-available').textContent = euros(a.availableMicros);
    const cap = a.dailyCap;
    $('acc-today').textContent = cap ? euros(cap.usedMicros) : 'no key cap (sign-in)';
    $('acc-cap-box').hidden = !(cap && cap.capMicros);
    if (cap && cap.capMicros) {
      $('acc-cap').max = cap.capMicros;
      $('acc-cap').value = Math.min(cap.usedMicros, cap.capMicros);
      $('acc-cap-text').textContent = `${euros(cap.usedMicros)} of ${euros(cap.capMicros)}, until ${when(cap.resetsAt)}`;
    }
    ledger.next = a.nextCursor;
    replaceRows($('ledger').tBodies[0], a.ledger.map((e) => h('tr', {},
      cell(when(e.createdAt)), cell(e.kind), cell(euros(e.amountMicros), 'num'),
      cell(e.subject || '–', 'mono'), cell(e.keyId || '–', 'mono'))));
    $('ledger-page').textContent = `Page ${ledger.page + 1}`;
    $('ledger-newer').disabled = ledger.page === 0;
    $('ledger-older').disabled = !ledger.next;
    drawChart(await charges());
    status(`Account ${a.name || a.accountId}, updated ${new Date().toLocaleTimeString()}`);
  };

  // The account's newest charges (up to CHART_PAGES pages of 100).
  async function charges() {
    const all = [];
    let cursor = null;
    for (let i = 0; i < CHART_PAGES; i++) {
      const q = `/account?kind=charge&limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const page = await api(q);
      all.push(...page.ledger);
      cursor = page.nextCursor;
      if (!cursor) break;
    }
    return all;
  }

  // A bucket width that gives at most 24 bars over the charges' span.
  function bucketMs(spanMs) {
    for (const ms of [60e3, 300e3, 900e3, 3600e3, 6 * 3600e3, 86400e3, 7 * 86400e3]) {
      if (spanMs / ms < 24) return ms;
    }
    return 30 * 86400e3;
  }

  const SVG = 'http://www.w3.org/2000/svg';
  function s(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // Stacked bars of charges per time bucket and kind. Each bar segment
  // carries its kind and amount (data-kind, data-micros) and a <title>.
  function drawChart(entries) {
    const svg = $('chart');
    const totals = Object.fromEntries(KINDS.map((k) => [k, { n: 0, micros: 0 }]));
    const shown = entries.filter((e) => kindOf(e.subject));
    svg.replaceChildren();
    const W = 720, H = 240, left = 88, bottom = 28, top = 12;
    if (!shown.length) {
      svg.append(s('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'No charges yet'));
      $('chart-desc').textContent = 'No charges yet.';
      replaceRows($('chart-totals').tBodies[0], []);
      return;
    }
    const times = shown.map((e) => Date.parse(e.createdAt));
    const first = Math.min(...times), last = Math.max(...times);
    const width = bucketMs(last - first);
    const start = Math.floor(first / width) * width;
    const n = Math.floor((last - start) / width) + 1;
    const buckets = Array.from({ length: n }, () => Object.fromEntries(KINDS.map((k) => [k, 0])));
    shown.forEach((e, i) => {
      const k = kindOf(e.subject);
      buckets[Math.floor((times[i] - start) / width)][k] += e.amountMicros;
      totals[k].n += 1;
      totals[k].micros += e.amountMicros;
    });
    const max = Math.max(...buckets.map((b) => KINDS.reduce((sum, k) => sum + b[k], 0)), 1);
    const plotW = W - left - 8, plotH = H - top - bottom;
    const slot = plotW / n, barW = Math.max(2, Math.min(40, slot * 0.7));
    svg.append(s('line', { class: 'axis', x1: left, y1: top, x2: left, y2: top + plotH }));
    svg.append(s('line', { class: 'axis', x1: left, y1: top + plotH, x2: W - 8, y2: top + plotH }));
    svg.append(s('text', { x: left - 6, y: top + 10, 'text-anchor': 'end' }, euros(max)));
    svg.append(s('text', { x: left - 6, y: top + plotH, 'text-anchor': 'end' }, '0'));
    const label = (t) => new Date(t).toLocaleString([], { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
    svg.append(s('text', { x: left, y: H - 8 }, label(start)));
    svg.append(s('text', { x: W - 8, y: H - 8, 'text-anchor': 'end' }, label(start + n * width)));
    buckets.forEach((b, i) => {
      let y = top + plotH;
      const x = left + i * slot + (slot - barW) / 2;
      for (const k of KINDS) {
        if (!b[k]) continue;
        const hgt = Math.max(1, (b[k] / max) * plotH);
        y -= hgt;
        const r = s('rect', { class: k, x: x.toFixed(1), y: y.toFixed(1), width: barW.toFixed(1), height: hgt.toFixed(1), 'data-kind': k, 'data-micros': b[k] });
        r.append(s('title', {}, `${k}, ${label(start + i * width)}: ${euros(b[k])}`));
        svg.append(r);
      }
    });
    const minutes = width / 60e3;
    const per = minutes < 60 ? `${minutes} minute` : minutes < 1440 ? `${minutes / 60} hour` : `${minutes / 1440} day`;
    $('chart-desc').textContent = `Charges per ${per}, stacked by kind, from ${label(start)} to ${label(start + n * width)}: `
      + KINDS.map((k) => `${k} ${euros(totals[k].micros)}`).join(', ') + '.';
    replaceRows($('chart-totals').tBodies[0], KINDS.map((k) => h('tr', { 'data-kind': k },
      h('th', { scope: 'row', text: k }), cell(String(totals[k].n), 'num'), cell(euros(totals[k].micros), 'num'))));
  }

  // ---- batches and jobs --------------------------------------------------

  let openBatch = null;
  let openJob = null;

  refreshers.work = async () => {
    const [batches, jobs] = await Promise.all([api('/batches?limit=20'), api('/jobs?limit=20')]);
    replaceRows($('batches').tBodies[0], batches.batches.map((b) => {
      const done = b.counts.completed + b.counts.failed;
      return h('tr', { 'data-batch-id': b.batchId },
        h('td', {}, h('button', { type: 'button', class: 'link', text: b.batchId, 'aria-label': `Open batch ${b.batchId}`, onclick: () => { openBatch = b.batchId; tick(); } })),
        cell(when(b.createdAt)), cell(b.script),
        h('td', {}, h('progress', { max: b.total, value: done, 'aria-label': `${done} of ${b.total} items done` })),
        cell(String(b.counts.waiting), 'num waiting'), cell(String(b.counts.active), 'num active'),
        cell(String(b.counts.completed), 'num completed'), cell(String(b.counts.failed), 'num failed'));
    }));
    replaceRows($('jobs').tBodies[0], jobs.jobs.map((j) => h('tr', { 'data-job-id': j.jobId },
      h('td', {}, h('button', { type: 'button', class: 'link', text: j.jobId, 'aria-label': `Open job ${j.jobId}`, onclick: () => openJobDetail(j.jobId) })),
      cell(j.phase, 'phase'), cell(String(j.attempt), 'num'), cell(when(j.createdAt)))));
    if (openBatch) await showBatch(openBatch);
    if (openJob) await showJob(openJob);
    status(`Updated ${new Date().toLocaleTimeString()}`);
  };

  async function showBatch(id) {
    const b = await api(`/batches/${encodeURIComponent(id)}`);
    $('batch-detail').hidden = false;
    $('h-batch').textContent = `Batch ${b.batchId}: ${b.counts.completed} completed, ${b.counts.failed} failed of ${b.total}`;
    replaceRows($('items').tBodies[0], b.jobs.map((j) => h('tr', { 'data-item-id': j.jobId },
      cell(j.url, 'mono'), cell(j.state, 'state'), cell(j.failedReason || ''),
      h('td', {}, j.state === 'completed' || j.state === 'failed'
        ? h('button', { type: 'button', text: 'Files', 'aria-label': `Files of ${j.url}`, onclick: () => showItem(j.jobId, j.url) })
        : ''))));
  }

  // An item's files: each through its signed download URL; the screenshot
  // shown, the others as downloads.
  async function showItem(id, url) {
    const item = await api(`/jobs/${encodeURIComponent(id)}`);
    $('item-files').hidden = false;
    $('h-item').textContent = `Files of ${url}`;
    const links = [];
    const shot = $('item-shot');
    shot.hidden = true;
    for (const kind of Object.keys(item.artifacts || {}).sort()) {
      const { url: signed } = await api(`/artifacts/${encodeURIComponent(id)}/${kind}`);
      if (kind === 'screenshot') {
        shot.alt = `Screenshot of ${url}`;
        shot.src = signed;
        shot.hidden = false;
      }
      links.push(h('li', {}, h('a', { href: signed, download: `${id}-${kind}`, rel: 'noreferrer', 'data-kind': kind, text: `${kind} (download)` })));
    }
    if (!links.length) links.push(h('li', { text: item.failedReason ? `No files: ${item.failedReason}` : 'No files.' }));
    $('item-links').replaceChildren(...links);
    $('h-item').scrollIntoView({ block: 'nearest' });
  }

  // A job's attempts and log: a running attempt's log is followed
  // (GET /jobs/{id}/logs?follow=true, read as it streams).
  let following = null;
  async function openJobDetail(id) {
    openJob = id;
    if (following) following.abort();
    following = null;
    $('job-log').textContent = '';
    delete $('job-log').dataset.done;
    await showJob(id);
  }

  async function showJob(id) {
    const j = await api(`/jobs/${encodeURIComponent(id)}`);
    $('job-detail').hidden = false;
    $('h-job').textContent = `Job ${j.jobId}: ${j.phase}`;
    $('job-detail').dataset.phase = j.phase;
    replaceRows($('attempts').tBodies[0], j.attempts.map((a) => h('tr', {},
      cell(String(a.attempt), 'num'), cell(a.phase), cell(when(a.startedAt)), cell(when(a.endedAt)),
      cell(a.termination ? a.termination.reason : ''))));
    // Once followed to its end (or read), a job's log is not asked again.
    const log = $('job-log');
    if (following || log.dataset.done === id) return;
    if (!TERMINAL.has(j.phase)) {
      follow(id);
    } else if (j.logs && j.logs.available) {
      log.textContent = await text(`/jobs/${encodeURIComponent(id)}/logs`);
      log.dataset.done = id;
      $('job-log-state').textContent = 'The attempt has ended; its published log.';
    } else {
      $('job-log-state').textContent = 'No log published.';
    }
  }

  async function text(path) {
    const r = await fetch(path, { headers: auth(), cache: 'no-store', credentials: 'omit' });
    if (!r.ok) throw new ApiFailure(r.status, 'log');
    return r.text();
  }

  async function follow(id) {
    const ctl = new AbortController();
    following = ctl;
    const log = $('job-log');
    log.textContent = '';
    $('job-log-state').textContent = 'Following the running attempt…';
    try {
      const r = await fetch(`/jobs/${encodeURIComponent(id)}/logs?follow=true`, {
        headers: auth(), cache: 'no-store', credentials: 'omit', signal: ctl.signal,
      });
      if (!r.ok) throw new ApiFailure(r.status, 'log');
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        log.append(decoder.decode(value, { stream: true }));
        log.scrollTop = log.scrollHeight;
      }
      $('job-log-state').textContent = 'The attempt has ended.';
      log.dataset.done = id;
    } catch (e) {
      if (ctl.signal.aborted) return;
      $('job-log-state').textContent = `The log could not be followed: ${e.message}`;
    } finally {
      if (following === ctl) following = null;
    }
  }

  // ---- sessions ----------------------------------------------------------

  // Sessions leased in this tab: their cdpUrl and liveViewUrl (the token is
  // the session's credential, kept in memory like the key).
  const leased = new Map();
  const thumbs = new Map(); // sessionId -> {src, at}
  let openSessionFiles = null;

  refreshers.sessions = async () => {
    const [live, ledgerPage] = await Promise.all([api('/sessions'), api('/account?limit=100')]);
    const liveIds = new Set(live.map((x) => x.sessionId));
    replaceRows($('sessions').tBodies[0], live.map((x) => {
      const mine = leased.get(x.sessionId);
      const thumb = thumbs.get(x.sessionId);
      if (mine && x.status === 'running') refreshThumb(x.sessionId, mine.cdpUrl);
      const page = thumb
        ? h('img', { class: 'thumb', src: thumb.src, alt: `The session's page: ${thumb.url || 'blank'}` })
        : h('span', { text: mine ? 'waiting for the page…' : 'no thumbnail (leased elsewhere)' });
      const actions = h('td', {},
        mine ? h('a', { href: mine.liveViewUrl, target: '_blank', rel: 'noreferrer noopener', class: 'live-view', text: 'Live view' }) : '',
        ' ',
        h('button', { type: 'button', text: 'Release', 'aria-label': `Release ${x.sessionId}`, onclick: () => release(x.sessionId) }));
      return h('tr', { 'data-session-id': x.sessionId },
        cell(x.sessionId, 'mono'), cell(x.status, 'state'), h('td', {}, page),
        cell(when(x.createdAt)), cell(when(x.expiresAt)), actions);
    }));
    // Ended sessions: those the ledger settled (a charge or a release of
    // their reservation) that are no longer live.
    const ended = new Map();
    for (const e of ledgerPage.ledger) {
      if (!e.subject || !e.subject.startsWith('ses_') || liveIds.has(e.subject)) continue;
      if (e.kind !== 'charge' && e.kind !== 'release') continue;
      const row = ended.get(e.subject) || { charged: 0, at: e.createdAt };
      if (e.kind === 'charge') row.charged += e.amountMicros;
      ended.set(e.subject, row);
    }
    replaceRows($('ended').tBodies[0], [...ended].map(([id, row]) => h('tr', { 'data-session-id': id },
      cell(id, 'mono'), cell(euros(row.charged), 'num charge'), cell(when(row.at)),
      h('td', {}, h('button', { type: 'button', text: 'Downloads and recording', 'aria-label': `Downloads and recording of ${id}`, onclick: () => sessionFiles(id) })))));
    if (openSessionFiles && liveIds.has(openSessionFiles)) $('session-files').hidden = true;
    status(`Updated ${new Date().toLocaleTimeString()}`);
  };

  async function release(id) {
    await api(`/sessions/${encodeURIComponent(id)}`, { method: 'DELETE' });
    thumbs.delete(id);
    status(`Released ${id}`);
    tick();
  }

  // An ended session's downloads and recording. A session leased without
  // recording answers 404 recording not present: said in words.
  async function sessionFiles(id) {
    openSessionFiles = id;
    $('session-files').hidden = false;
    $('h-session-files').textContent = `Files of ${id}`;
    const items = [];
    try {
      const d = await api(`/sessions/${encodeURIComponent(id)}/downloads`);
      for (const f of d.downloads || []) {
        items.push(h('li', {}, h('a', { href: f.url, rel: 'noreferrer', download: f.name, text: `${f.name} (${f.size} bytes)` })));
      }
      if (!(d.downloads || []).length) items.push(h('li', { text: 'No downloads.' }));
    } catch (e) {
      items.push(h('li', { text: `Downloads: ${e.error || e.message}` }));
    }
    const known = leased.get(id);
    if (!known || known.recording) {
      try {
        const r = await api(`/sessions/${encodeURIComponent(id)}/recording`);
        items.push(h('li', {}, h('a', { href: r.url, target: '_blank', rel: 'noreferrer noopener', class: 'recording', text: `Recording (${r.frames} frames)` })));
      } catch (e) {
        items.push(h('li', { text: `Recording: ${e.error || e.message}` }));
      }
    } else {
      items.push(h('li', { text: 'Leased without recording.' }));
    }
    $('session-links').replaceChildren(...items);
  }

  // A thumbnail of a session's page: a screenshot over the session's own CDP
  // endpoint (a lessee's command, through the grid's gate), at most every
  // THUMB_MS per session. The page is attached from a browser session of
  // the console's own, never at the connection's root: the root's
  // Target.attachedToTarget reaches every client of the session, and a
  // lessee's Playwright, already attached to that page, would fail on a
  // second attachment of it ("Duplicate target").
  const thumbing = new Set();
  function refreshThumb(id, cdpUrl) {
    const t = thumbs.get(id);
    if (thumbing.has(id) || (t && Date.now() - t.at < THUMB_MS)) return;
    thumbing.add(id);
    const ws = new WebSocket(cdpUrl.replace(/^http/, 'ws'));
    let next = 1;
    const pending = new Map();
    const call = (method, params = {}, sessionId) => new Promise((resolve, reject) => {
      const msg = { id: next++, method, params };
      if (sessionId) msg.sessionId = sessionId;
      pending.set(msg.id, { resolve, reject });
      ws.send(JSON.stringify(msg));
    });
    const done = () => { thumbing.delete(id); try { ws.close(); } catch (_) { /* closed */ } };
    const timer = setTimeout(done, 10000);
    ws.onmessage = (e) => {
      const m = JSON.parse(e.data);
      const p = m.id && pending.get(m.id);
      if (!p) return;
      pending.delete(m.id);
      if (m.error) p.reject(new Error(m.error.message)); else p.resolve(m.result);
    };
    ws.onerror = () => { clearTimeout(timer); done(); };
    ws.onopen = async () => {
      try {
        const { sessionId: browser } = await call('Target.attachToBrowserTarget');
        const { targetInfos } = await call('Target.getTargets', {}, browser);
        const pages = targetInfos.filter((x) => x.type === 'page');
        const page = pages.find((x) => x.url !== 'about:blank') || pages[0];
        if (!page) return;
        const { sessionId } = await call('Target.attachToTarget', { targetId: page.targetId, flatten: true }, browser);
        const shot = await call('Page.captureScreenshot', { format: 'jpeg', quality: 50 }, sessionId);
        await call('Target.detachFromTarget', { sessionId }, browser).catch(() => {});
        thumbs.set(id, { src: `data:image/jpeg;base64,${shot.data}`, url: page.url, at: Date.now() });
      } catch (_) {
        // The session went away meanwhile: the next poll no longer lists it.
      } finally {
        clearTimeout(timer);
        done();
      }
    };
  }

  async function lease(ev) {
    ev.preventDefault();
    const body = { ttlMinutes: Number($('lease-minutes').value) };
    if ($('lease-take-over').checked) body.takeOver = true;
    if ($('lease-recording').checked) body.recording = true;
    const l = await api('/sessions', { method: 'POST', body });
    leased.set(l.sessionId, { cdpUrl: l.cdpUrl, liveViewUrl: l.liveViewUrl, recording: !!body.recording });
    status(`Leased ${l.sessionId}`);
    tick();
  }

  // ---- grid --------------------------------------------------------------

  refreshers.grid = async () => {
    const [g, d] = await Promise.all([api('/grid'), api('/grid/queue-depth')]);
    $('grid-depth').textContent = d.depth;
    $('grid-wait').textContent = g.queue.wait;
    $('grid-prioritized').textContent = g.queue.prioritized;
    $('grid-delayed').textContent = g.queue.delayed;
    $('grid-workers').textContent = g.workers;
    $('grid-sessions').textContent = `${g.sessions} of ${g.maxSessions}`;
    $('grid-nodes').textContent = g.nodes ?? '–';
    $('grid-slots').max = Math.max(g.maxSessions, 1);
    $('grid-slots').value = g.sessions;
    status(`Updated ${new Date().toLocaleTimeString()}`);
  };

  // ---- sign-in -----------------------------------------------------------

  async function signIn(ev) {
    ev.preventDefault();
    const given = $('key').value.trim();
    $('key').value = '';
    if (!given) return;
    key = given;
    try {
      const a = await api('/account?limit=1');
      $('who').textContent = `Account ${a.name || a.accountId}`;
    } catch (e) {
      key = null;
      $('sign-in-error').textContent = e instanceof ApiFailure && e.status === 401
        ? 'The grid did not accept this key.'
        : `The grid did not answer: ${e.message}`;
      return;
    }
    $('sign-in-error').textContent = '';
    $('sign-in').hidden = true;
    for (const id of ['views', 'who', 'sign-out']) $(id).hidden = false;
    show('account');
    $('main').focus();
  }

  function signOut() {
    key = null;
    if (following) following.abort();
    location.reload();
  }

  function wire() {
    $('sign-in').addEventListener('submit', signIn);
    $('sign-out').addEventListener('click', signOut);
    for (const b of document.querySelectorAll('#views button')) b.addEventListener('click', () => show(b.dataset.view));
    $('ledger-older').addEventListener('click', () => {
      if (!ledger.next) return;
      ledger.cursors[ledger.page + 1] = ledger.next;
      ledger.page += 1;
      lastAccount = 0;
      tick();
    });
    $('ledger-newer').addEventListener('click', () => {
      if (ledger.page === 0) return;
      ledger.page -= 1;
      lastAccount = 0;
      tick();
    });
    $('lease').addEventListener('submit', (ev) => lease(ev).catch((e) => status(`Lease refused: ${e.error || e.message}`)));
    setInterval(tick, POLL_MS);
  }

  wire();
})();
