// Signs in to a local site in a leased grid session with Playwright, or
// reads what the session found of a sign-in, and prints one JSON line.
//   node contexts.js CDP_URL PAGE_URL signin VALUE   sets the cookie
//     grid_signin=VALUE (a day long) and localStorage grid_user=VALUE
//   node contexts.js CDP_URL PAGE_URL signin-open VALUE   the same, the
//     page left open (a save point reads the storage of open pages), and
//     `settledAt`: a moment after which the sign-in is in the browser
//   node contexts.js CDP_URL PAGE_URL check           reads both back
//   node contexts.js CDP_URL - crash                  crashes the browser
//     (Browser.crash), as a lost browser
//   node contexts.js CDP_URL PAGE_URL fill BYTES      stores BYTES of
//     filler in localStorage (a state over a context's bound)
//   node contexts.js CDP_URL PAGE_URL idb-write VALUE  writes an IndexedDB
//     database of values JSON does not carry (a Date, bytes, a Map, a Blob,
//     ...), VALUE among them
//   node contexts.js CDP_URL PAGE_URL idb-check        reads that database
//     back, describing each value's kind
//   node contexts.js CDP_URL PAGE_URL idb-fill BYTES   writes a database
//     `grid_cache` of one record of BYTES characters (a site's large cache)
//   node contexts.js CDP_URL PAGE_URL keys JSON        sets localStorage to
//     the [key, value] pairs of JSON (keys named like Storage's members too)
//   node contexts.js CDP_URL PAGE_URL keys-check       every localStorage
//     pair, read by index: {pairs: [[key, value], ...]}
//   node contexts.js CDP_URL - fill-origins N BYTES    opens N origins,
//     http://127.0.0.1:{20001..}, each answered by this client itself (no
//     request leaves it), and stores BYTES characters of localStorage in each
const { chromium } = require('playwright-core');

async function main() {
  const [cdpUrl, pageUrl, mode, arg] = process.argv.slice(2);
  const browser = await chromium.connectOverCDP(cdpUrl);
  if (mode === 'crash') {
    const session = await browser.newBrowserCDPSession();
    // No answer comes: the browser is gone.
    session.send('Browser.crash').catch(() => {});
    await new Promise((resolve) => browser.on('disconnected', resolve));
    return { crashed: true };
  }
  try {
    const context = browser.contexts()[0];
    const page = await context.newPage();
    if (mode === 'fill-origins') {
      const [n, bytes] = [Number(arg), Number(process.argv[6])];
      await page.route('**/*', (route) => route.fulfill({ contentType: 'text/html', body: '<!doctype html><title>o</title>' }));
      for (let i = 0; i < n; i++) {
        await page.goto(`http://127.0.0.1:${20001 + i}/`);
        await page.evaluate((b) => localStorage.setItem('filler', 'x'.repeat(b)), bytes);
      }
      await page.close();
      return { origins: n };
    }
    await page.goto(pageUrl);
    if (mode === 'signin' || mode === 'signin-open') {
      await page.evaluate((v) => {
        document.cookie = `grid_signin=${v}; max-age=86400; path=/`;
        localStorage.setItem('grid_user', v);
      }, arg);
    } else if (mode === 'fill') {
      await page.evaluate((n) => localStorage.setItem('grid_filler', 'x'.repeat(n)), Number(arg));
    } else if (mode === 'idb-write') {
      await page.evaluate(writeDatabase, arg);
    } else if (mode === 'idb-fill') {
      await page.evaluate(async (n) => {
        const done = (r) => new Promise((ok, no) => { r.onsuccess = () => ok(r.result); r.onerror = () => no(r.error); });
        const open = indexedDB.open('grid_cache', 1);
        open.onupgradeneeded = () => open.result.createObjectStore('pages');
        const db = await done(open);
        const tx = db.transaction('pages', 'readwrite');
        tx.objectStore('pages').put('x'.repeat(n), 'filler');
        await new Promise((ok, no) => { tx.oncomplete = ok; tx.onerror = () => no(tx.error); });
        db.close();
      }, Number(arg));
    } else if (mode === 'keys') {
      await page.evaluate((pairs) => { for (const [k, v] of pairs) localStorage.setItem(k, v); }, JSON.parse(arg));
    } else if (mode === 'keys-check') {
      const pairs = await page.evaluate(() => {
        const out = [];
        for (let i = 0; i < localStorage.length; i++) out.push([localStorage.key(i), localStorage.getItem(localStorage.key(i))]);
        return out;
      });
      await page.close();
      return { pairs };
    } else if (mode === 'idb-check') {
      const read = await page.evaluate(readDatabase);
      await page.close();
      return read;
    }
    const seen = await page.evaluate(() => ({
      cookie: document.cookie,
      user: localStorage.getItem('grid_user'),
    }));
    const cookies = (await context.cookies()).map((c) => `${c.name}=${c.value}`);
    if (mode === 'signin-open') {
      // The sign-in is in the browser's stores by now (the cookie read back
      // above): a save point that begins after `settledAt` holds it. One more
      // write after it changes the state, so such a save point comes, even
      // when one stored the sign-in already while this script ran.
      const settledAt = Date.now();
      await page.evaluate((t) => localStorage.setItem('grid_settled', String(t)), settledAt);
      return { ...seen, cookies, settledAt };
    }
    await page.close();
    return { ...seen, cookies };
  } finally {
    await browser.close();
  }
}

// In the page: database `grid_app` at version 3, a store keyed by a field
// with an index, and one with keys of its own, generated.
async function writeDatabase(value) {
  const done = (r) => new Promise((ok, no) => { r.onsuccess = () => ok(r.result); r.onerror = () => no(r.error); });
  const open = indexedDB.open('grid_app', 3);
  open.onupgradeneeded = () => {
    const tokens = open.result.createObjectStore('tokens', { keyPath: 'id' });
    tokens.createIndex('by_user', 'user', { unique: false });
    open.result.createObjectStore('files', { autoIncrement: true });
  };
  const db = await done(open);
  const tx = db.transaction(['tokens', 'files'], 'readwrite');
  tx.objectStore('tokens').put({
    id: 'session',
    user: value,
    at: new Date(1700000000000),
    bytes: new Uint8Array([1, 2, 255]),
    nested: { list: [1, 'two', null, true], map: new Map([['k', 1]]), set: new Set(['s']), big: 12n, nan: NaN, undef: undefined },
  });
  tx.objectStore('files').put(new Blob(['hello blob'], { type: 'text/plain' }));
  tx.objectStore('files').put(new File(['a,b'], 'note.csv', { type: 'text/csv', lastModified: 1600000000000 }));
  await new Promise((ok, no) => { tx.oncomplete = ok; tx.onerror = () => no(tx.error); });
  db.close();
}

async function readDatabase() {
  const done = (r) => new Promise((ok, no) => { r.onsuccess = () => ok(r.result); r.onerror = () => no(r.error); });
  const names = (await indexedDB.databases()).map((d) => `${d.name}@${d.version}`);
  if (!names.includes('grid_app@3')) return { databases: names };
  const db = await done(indexedDB.open('grid_app'));
  const tx = db.transaction(['tokens', 'files'], 'readonly');
  const tokens = tx.objectStore('tokens');
  const token = await done(tokens.get('session'));
  const byUser = await done(tokens.index('by_user').getAll(token.user));
  const fileKeys = await done(tx.objectStore('files').getAllKeys());
  const files = await done(tx.objectStore('files').getAll());
  db.close();
  const n = token.nested;
  return {
    databases: names,
    stores: [...db.objectStoreNames],
    keyPath: tokens.keyPath,
    indexes: [...tokens.indexNames],
    user: token.user,
    byUser: byUser.length,
    at: token.at instanceof Date ? token.at.getTime() : String(token.at),
    bytes: token.bytes instanceof Uint8Array ? [...token.bytes] : String(token.bytes),
    list: n.list,
    map: n.map instanceof Map ? [...n.map] : String(n.map),
    set: n.set instanceof Set ? [...n.set] : String(n.set),
    big: typeof n.big === 'bigint' ? n.big.toString() : String(n.big),
    nan: Number.isNaN(n.nan),
    undef: 'undef' in n && n.undef === undefined,
    fileKeys,
    blob: files[0] instanceof Blob ? [files[0].type, await files[0].text()] : String(files[0]),
    file: files[1] instanceof File ? [files[1].name, files[1].type, files[1].lastModified, await files[1].text()] : String(files[1]),
  };
}

main().then(
  (out) => console.log(JSON.stringify(out)),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
