// Clicks download links in a leased grid session with Puppeteer, as a
// lessee does, and prints one JSON line of what the page showed.
//   node session_downloads.js CDP_URL PAGE_URL [PAGE_URL...]
// Each page is opened in a new tab and its link #get clicked; the script
// does not wait for the files: the grid's listing is what the test reads.
const puppeteer = require('puppeteer-core');

(async () => {
  const [cdpUrl, ...pages] = process.argv.slice(2);
  // defaultViewport null: the session's own viewport stays.
  const browser = await puppeteer.connect({ browserWSEndpoint: cdpUrl.replace(/^http/, 'ws'), defaultViewport: null });
  const clicked = [];
  try {
    for (const url of pages) {
      const page = await browser.newPage();
      await page.goto(url);
      await page.click('#get');
      clicked.push(await page.title());
    }
  } finally {
    await browser.disconnect();
  }
  console.log(JSON.stringify({ clicked }));
})().catch((e) => {
  console.error(`FAILED: ${e.stack || e}`);
  process.exit(1);
});
