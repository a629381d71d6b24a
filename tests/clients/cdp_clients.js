// Drives a leased grid session with Playwright and Puppeteer, as users do,
// and prints one JSON line of what each saw.
//   node cdp_clients.js CDP_URL PAGE_URL
//   node cdp_clients.js CDP_URL PAGE_URL simplest   (Puppeteer only, the
//     README's form: the cdpUrl itself as browserWSEndpoint, ws:// for http://)
const { chromium } = require('playwright-core');
const puppeteer = require('puppeteer-core');

async function playwright(cdpUrl, pageUrl) {
  const browser = await chromium.connectOverCDP(cdpUrl);
  try {
    const context = browser.contexts()[0];
    const page = await context.newPage();
    await page.goto(pageUrl);
    const title = await page.title();
    const fresh = await browser.newContext();
    const other = await fresh.newPage();
    await other.goto(pageUrl);
    const freshTitle = await other.title();
    const screenshotBytes = (await page.screenshot()).length;
    let fileNavigation = 'loaded';
    try {
      await page.goto('file:///etc/passwd');
    } catch (e) {
      fileNavigation = e.message.split('\n')[0];
    }
    return { title, freshTitle, screenshotBytes, fileNavigation };
  } finally {
    await browser.close();
  }
}

async function puppeteerRun(cdpUrl, pageUrl) {
  const version = await (await fetch(`${cdpUrl}/json/version`)).json();
  const browser = await puppeteer.connect({ browserWSEndpoint: version.webSocketDebuggerUrl });
  try {
    const page = await browser.newPage();
    await page.goto(pageUrl);
    return { title: await page.title(), text: await page.$eval('h1', (h) => h.textContent) };
  } finally {
    await browser.disconnect();
  }
}

async function puppeteerSimplest(cdpUrl, pageUrl) {
  const browser = await puppeteer.connect({ browserWSEndpoint: cdpUrl.replace(/^http/, 'ws') });
  try {
    const page = await browser.newPage();
    await page.goto(pageUrl);
    return { title: await page.title() };
  } finally {
    await browser.disconnect();
  }
}

(async () => {
  const [cdpUrl, pageUrl, mode] = process.argv.slice(2);
  if (mode === 'simplest') {
    console.log(JSON.stringify({ puppeteer: await puppeteerSimplest(cdpUrl, pageUrl) }));
    return;
  }
  const out = { playwright: await playwright(cdpUrl, pageUrl), puppeteer: await puppeteerRun(cdpUrl, pageUrl) };
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error(`FAILED: ${e.stack || e}`);
  process.exit(1);
});
