// The web console (docs/console.md) in a real browser: a leased grid
// session's Chromium, driven by Playwright over its cdpUrl.
//
//   node console.js CDP_URL BASE_URL KEY OTHER_KEY PLAN_JSON SHOTS_DIR
//
// PLAN_JSON: {"urls": [...], "job": {POST /jobs body}, "pageUrl": "..."}.
// Gives KEY, submits the batch and the job through the API (as any client
// of the account would) and watches the console show them: the batch's
// counts reach completed, an item's screenshot opens, the running job's log
// is followed; leases a session in the console, shows a page in it
// (`pageUrl`) and watches its thumbnail and live view; releases it and
// opens its recording; reads the charges chart; then gives OTHER_KEY and
// reads what the console shows that account. Runs axe-core on every view
// and saves a PNG of each into SHOTS_DIR. Prints one JSON document of what
// it saw; the Rust test judges it.
//
// axe-core is evaluated through DevTools (page.evaluate of its source),
// which the page's Content-Security-Policy does not govern, so the context
// needs no bypassCSP: the console runs under its real policy throughout.
const fs = require('fs');
const path = require('path');
const { chromium } = require('playwright-core');

const [cdpUrl, base, key, otherKey, planJson, shots] = process.argv.slice(2);
const plan = JSON.parse(planJson);
const AXE = fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

async function api(k, method, p, body) {
  for (let i = 0; ; i++) {
    const r = await fetch(base + p, {
      method,
      headers: { 'x-api-key': k, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    const json = text ? JSON.parse(text) : null;
    // The engine's connection comes up just after start (the contract: resend).
    if (r.status === 503 && json && json.error === 'COMPUTE_UNAVAILABLE' && i < 200) {
      await new Promise((res) => setTimeout(res, 100));
      continue;
    }
    return { status: r.status, json };
  }
}

async function until(what, f, ms = 60000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function axe(page, view) {
  if (!(await page.evaluate(() => typeof window.axe !== 'undefined'))) await page.evaluate(`${AXE}\n;0`);
  const r = await page.evaluate(() => window.axe.run(document, { resultTypes: ['violations'] }));
  return r.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => ({ view, id: v.id, impact: v.impact, nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 5) }));
}

async function show(page, view) {
  await page.click(`#views button[data-view="${view}"]`);
  await page.waitForSelector(`#view-${view}:not([hidden])`);
}

async function shoot(page, name) {
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
}

async function main() {
  const out = { errors: [], violations: [] };
  const browser = await chromium.connectOverCDP(cdpUrl);
  const context = browser.contexts()[0] || (await browser.newContext());
  const page = await context.newPage();
  await page.setViewportSize({ width: 1100, height: 900 });
  const listen = (p, where) => {
    p.on('console', (m) => { if (m.type() === 'error') out.errors.push(`${where}: ${m.text()} (${m.location().url})`); });
    p.on('pageerror', (e) => out.errors.push(`${where}: ${e.message}`));
  };
  listen(page, 'console');

  // Give the key.
  const loadStart = Date.now();
  await page.goto(`${base}/console`);
  await page.waitForFunction(() => document.readyState === 'complete');
  out.loadMs = Date.now() - loadStart;
  out.violations.push(...(await axe(page, 'sign-in')));
  await page.fill('#key', key);
  await page.click('#sign-in button[type="submit"]');
  await page.waitForSelector('#views:not([hidden])');
  out.keyInUrl = page.url().includes(key);
  out.keyInStorage = await page.evaluate((k) => JSON.stringify({ ...localStorage, ...sessionStorage }).includes(k) || document.cookie.includes(k), key);

  // A batch submitted through the API fills up in the page.
  await show(page, 'work');
  const batch = await api(key, 'POST', '/batches', { urls: plan.urls, script: 'capture' });
  if (batch.status !== 201) throw new Error(`POST /batches: ${JSON.stringify(batch)}`);
  out.batchId = batch.json.batchId;
  const row = `#batches tr[data-batch-id="${out.batchId}"]`;
  await page.waitForSelector(row);
  out.batchSeen = await page.$eval(row, (r) => r.querySelector('.completed').textContent);
  await until('the batch completed in the page', async () => {
    const done = await page.$eval(row, (r) => Number(r.querySelector('.completed').textContent));
    return done === plan.urls.length;
  }, 120000);
  out.batchCompleted = await page.$eval(row, (r) => ({
    completed: Number(r.querySelector('.completed').textContent),
    failed: Number(r.querySelector('.failed').textContent),
  }));
  // An item's files: the screenshot shown through its signed URL.
  await page.click(`${row} button`);
  await page.waitForSelector('#items tbody tr button');
  await page.click('#items tbody tr button');
  await page.waitForSelector('#item-shot:not([hidden])');
  await until('the screenshot loaded', () => page.$eval('#item-shot', (i) => i.complete && i.naturalWidth > 0));
  out.screenshot = await page.$eval('#item-shot', (i) => ({ width: i.naturalWidth, src: i.src, alt: i.alt }));
  out.itemLinks = await page.$$eval('#item-links a', (as) => as.map((a) => a.dataset.kind));
  out.violations.push(...(await axe(page, 'batches')));
  await shoot(page, 'batches');

  // A running job's log, followed.
  const job = await api(key, 'POST', '/jobs', plan.job);
  if (job.status !== 202) throw new Error(`POST /jobs: ${JSON.stringify(job)}`);
  out.jobId = job.json.jobId;
  await page.waitForSelector(`#jobs tr[data-job-id="${out.jobId}"] button`);
  await page.click(`#jobs tr[data-job-id="${out.jobId}"] button`);
  out.logWhileRunning = await until('a log line while the job runs', async () => {
    const [phase, log] = await page.evaluate(() => [document.getElementById('job-detail').dataset.phase, document.getElementById('job-log').textContent]);
    return log.includes('tick 1') && !log.includes('done') ? { phase, log } : null;
  }, 90000);
  await until('the job finished in the page', async () => {
    const [phase, log] = await page.evaluate(() => [document.getElementById('job-detail').dataset.phase, document.getElementById('job-log').textContent]);
    return phase === 'SUCCEEDED' && log.includes('done');
  }, 90000);
  out.logAtEnd = await page.$eval('#job-log', (e) => e.textContent);
  out.logState = await page.$eval('#job-log-state', (e) => e.textContent);
  await page.$eval('#job-detail', (e) => e.scrollIntoView());
  out.violations.push(...(await axe(page, 'jobs')));
  await shoot(page, 'jobs');

  // A session leased in the console: listed, its thumbnail, its live view.
  await show(page, 'sessions');
  await page.fill('#lease-minutes', '5');
  await page.check('#lease-recording');
  await page.click('#lease button[type="submit"]');
  const live = '#sessions tbody tr';
  await page.waitForSelector(`${live} a.live-view`);
  out.sessionId = await page.$eval(live, (r) => r.dataset.sessionId);
  const viewUrl = await page.$eval(`${live} a.live-view`, (a) => a.href);
  await until('the session running', () => page.$eval(`${live} .state`, (c) => c.textContent === 'running'), 60000);
  // The lessee's Playwright shows a page in the session (its cdpUrl is the
  // view's address without /view) and stays connected while the console
  // takes its thumbnails beside it.
  const lessee = await chromium.connectOverCDP(viewUrl.replace(/\/view$/, ''));
  const lessees = [];
  lessee.on('disconnected', () => lessees.push('disconnected'));
  const lc = lessee.contexts()[0] || (await lessee.newContext());
  const lp = lc.pages()[0] || (await lc.newPage());
  await lp.goto(plan.pageUrl);
  out.thumbnail = await until('the thumbnail of the session\'s page', () =>
    page.evaluate((u) => {
      const img = document.querySelector('#sessions tbody tr img.thumb');
      return img && img.alt.includes(u) && img.complete && img.naturalWidth > 0 ? { alt: img.alt, width: img.naturalWidth } : null;
    }, plan.pageUrl), 30000);
  out.violations.push(...(await axe(page, 'sessions')));
  await shoot(page, 'sessions');
  const [view] = await Promise.all([context.waitForEvent('page'), page.click(`${live} a.live-view`)]);
  listen(view, 'live view');
  out.liveView = await until('the live view showing the page', () =>
    view.evaluate(async () => {
      const img = document.getElementById('frame');
      if (!img || !img.src.startsWith('data:image')) return null;
      await img.decode();
      const c = document.createElement('canvas');
      c.width = img.naturalWidth;
      c.height = img.naturalHeight;
      const g = c.getContext('2d');
      g.drawImage(img, 0, 0);
      const d = g.getImageData(Math.floor(c.width / 2), Math.floor(c.height / 2), 1, 1).data;
      return d[1] > 150 && d[0] < 80 && d[2] < 80 ? { rgb: [d[0], d[1], d[2]], status: document.getElementById('status').textContent } : null;
    }), 30000);
  await view.close();
  // The lessee's Playwright lived through the thumbnails and the live view.
  out.lesseeStillWorks = (await lp.evaluate(() => location.href)) === plan.pageUrl && lessees.length === 0;
  await lessee.close();

  // Released in the console: listed as ended, with its charge and recording.
  await page.click(`${live} button`);
  await until('the session gone from the live list', () => page.$$eval(live, (rs) => rs.length === 0));
  const ended = `#ended tr[data-session-id="${out.sessionId}"]`;
  await page.waitForSelector(ended, { timeout: 30000 });
  await until('the recording written', async () => (await api(key, 'GET', `/sessions/${out.sessionId}/recording`)).status === 200, 60000);
  await until('the session charged', async () => {
    const a = await api(key, 'GET', '/account?kind=charge&limit=100');
    return a.json.ledger.some((e) => e.subject === out.sessionId);
  }, 30000);
  await page.click(`${ended} button`);
  await page.waitForSelector('#session-links a.recording');
  out.endedCharge = await page.$eval(`${ended} .charge`, (c) => c.textContent);
  out.recordingLink = await page.$eval('#session-links a.recording', (a) => a.href.startsWith(location.origin + '/recordings/'));

  // The account: the chart holds the charges just made.
  await show(page, 'account');
  // A view change reads the account at once; wait for the session's charge in it.
  out.chart = await until('the chart with every kind charged', async () => {
    await show(page, 'grid');
    await show(page, 'account');
    await page.waitForTimeout(500);
    const sums = await page.$$eval('#chart rect[data-kind]', (rs) => {
      const s = {};
      for (const r of rs) s[r.dataset.kind] = (s[r.dataset.kind] || 0) + Number(r.dataset.micros);
      return s;
    });
    return sums.captures && sums.jobs && sums.sessions ? sums : null;
  }, 60000);
  out.chartDescription = await page.$eval('#chart-desc', (e) => e.textContent);
  out.ledgerRows = await page.$$eval('#ledger tbody tr', (rs) => rs.length);
  out.ledgerOlder = await page.$eval('#ledger-older', (b) => !b.disabled);
  out.violations.push(...(await axe(page, 'account')));
  await shoot(page, 'account');
  if (out.ledgerOlder) {
    await page.click('#ledger-older');
    await until('the ledger\'s second page', () => page.$eval('#ledger-page', (e) => e.textContent === 'Page 2'));
    out.ledgerPage2Rows = await page.$$eval('#ledger tbody tr', (rs) => rs.length);
    await page.click('#ledger-newer');
  }

  // The grid.
  await show(page, 'grid');
  out.grid = await until('the grid figures', () =>
    page.evaluate(() => {
      const t = (id) => document.getElementById(id).textContent;
      return t('grid-depth') !== '–' ? { depth: t('grid-depth'), workers: t('grid-workers'), sessions: t('grid-sessions'), nodes: t('grid-nodes') } : null;
    }));
  out.violations.push(...(await axe(page, 'grid')));
  await shoot(page, 'grid');

  // Another account's key: none of the first account's work.
  await page.click('#sign-out');
  await page.waitForSelector('#sign-in:not([hidden])');
  out.keyAfterReload = await page.evaluate(() => document.getElementById('key').value);
  await page.fill('#key', otherKey);
  await page.click('#sign-in button[type="submit"]');
  await page.waitForSelector('#views:not([hidden])');
  await page.waitForTimeout(1500);
  out.other = {};
  out.other.chartRects = await page.$$eval('#chart rect[data-kind]', (rs) => rs.length);
  out.other.ledgerSubjects = await page.$$eval('#ledger tbody tr td.mono', (cs) => cs.map((c) => c.textContent));
  await show(page, 'work');
  await page.waitForTimeout(2500);
  out.other.batches = await page.$$eval('#batches tbody tr', (rs) => rs.map((r) => r.dataset.batchId));
  out.other.jobs = await page.$$eval('#jobs tbody tr', (rs) => rs.map((r) => r.dataset.jobId));
  await show(page, 'sessions');
  await page.waitForTimeout(2500);
  out.other.sessions = await page.$$eval('#sessions tbody tr, #ended tbody tr', (rs) => rs.map((r) => r.dataset.sessionId));
  out.other.text = await page.evaluate(() => document.body.innerText);

  await page.close();
  await browser.close();
  return out;
}

main().then(
  (out) => { process.stdout.write(JSON.stringify(out)); process.exit(0); },
  (e) => { console.error(e && e.stack ? e.stack : String(e)); process.exit(1); },
);
