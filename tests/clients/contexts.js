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
    await page.goto(pageUrl);
    if (mode === 'signin' || mode === 'signin-open') {
      await page.evaluate((v) => {
        document.cookie = `grid_signin=${v}; max-age=86400; path=/`;
        localStorage.setItem('grid_user', v);
      }, arg);
    } else if (mode === 'fill') {
      await page.evaluate((n) => localStorage.setItem('grid_filler', 'x'.repeat(n)), Number(arg));
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

main().then(
  (out) => console.log(JSON.stringify(out)),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
