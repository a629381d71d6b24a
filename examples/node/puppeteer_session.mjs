// Leases a browser session over plain HTTP and drives it with Puppeteer.
//
//   npm install puppeteer-core        # core only: the grid has the browser
//   export GRID_URL=http://127.0.0.1:8080 GRID_API_KEY=grid_...
//   node examples/node/puppeteer_session.mjs https://example.com/
//
// Prints the session id, then `title: ...` of the page, and releases the
// session however the browser part ended. puppeteer-core is resolved from
// here upwards or through NODE_PATH. For a grid serving HTTPS under its own
// certificate, run with NODE_EXTRA_CA_CERTS=ca.pem.
import { createRequire } from 'node:module';

const puppeteer = createRequire(import.meta.url)('puppeteer-core');

const GRID_URL = (process.env.GRID_URL || 'http://127.0.0.1:8080').replace(/\/$/, '');
const API_KEY = process.env.GRID_API_KEY;
if (!API_KEY) throw new Error('set GRID_API_KEY to your API key');

// One call of the grid's API; the answer's JSON (null for 204).
async function grid(method, path, body) {
  const answer = await fetch(GRID_URL + path, {
    method,
    headers: { 'x-api-key': API_KEY, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!answer.ok) throw new Error(`${method} ${path}: ${answer.status} ${await answer.text()}`);
  return answer.status === 204 ? null : answer.json();
}

// Polls GET /sessions until the session runs (its browser started and attested).
async function waitRunning(sessionId, withinMs = 90_000) {
  const deadline = Date.now() + withinMs;
  while (Date.now() < deadline) {
    const mine = (await grid('GET', '/sessions')).find((s) => s.sessionId === sessionId);
    if (!mine) throw new Error(`session ${sessionId} ended before it ran`);
    if (mine.status === 'running') return;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  throw new Error(`session ${sessionId} not running within ${withinMs} ms`);
}

const pageUrl = process.argv[2];
if (!pageUrl) throw new Error('usage: puppeteer_session.mjs URL');

// Billed for the time the browser is ready, up to ttlMinutes; released below.
const lease = await grid('POST', '/sessions', { ttlMinutes: 5 });
console.log(`session ${lease.sessionId}`);
try {
  await waitRunning(lease.sessionId);
  // Not `browserURL: cdpUrl`: Puppeteer keeps only its origin and asks
  // `/json/version` at the server's root, dropping the cdpUrl's path (the
  // session id and token), where the grid has no such page. Ask discovery here and
  // hand Puppeteer the WebSocket it names, which points back through the grid.
  const version = await (await fetch(`${lease.cdpUrl}/json/version`)).json();
  const browser = await puppeteer.connect({ browserWSEndpoint: version.webSocketDebuggerUrl });
  try {
    const page = await browser.newPage();
    await page.goto(pageUrl);
    console.log(`title: ${await page.title()}`);
    await page.close();
  } finally {
    await browser.disconnect(); // the session's browser keeps running until released
  }
} finally {
  await grid('DELETE', `/sessions/${lease.sessionId}`);
  console.log(`released ${lease.sessionId}`);
}
