// Clicks download links in a leased grid session with Playwright, as a
// lessee does: a new context (Playwright saves its downloads under their
// guid, `allowAndName`), each page's link #get clicked, each download
// waited for (its context goes when this client disconnects), and prints one
// JSON line with the name each download suggested and its failure (null).
//   node playwright_downloads.js CDP_URL PAGE_URL [PAGE_URL...]
const { chromium } = require('playwright-core');

(async () => {
  const [cdpUrl, ...pages] = process.argv.slice(2);
  const browser = await chromium.connectOverCDP(cdpUrl);
  const suggested = [];
  const failures = [];
  const context = await browser.newContext({ acceptDownloads: true });
  for (const url of pages) {
    const page = await context.newPage();
    await page.goto(url);
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#get')]);
    suggested.push(download.suggestedFilename());
    failures.push(await download.failure());
  }
  console.log(JSON.stringify({ suggested, failures }));
  process.exit(0);
})().catch((e) => {
  console.error(`FAILED: ${e.stack || e}`);
  process.exit(1);
});
