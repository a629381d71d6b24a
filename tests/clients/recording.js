// Session recordings with Playwright, over a leased grid session's cdpUrl.
//
//   node recording.js drive CDP_URL DWELL_MS PAGE_URL [PAGE_URL...]
//     Opens each page in turn in the session's default context, as a lessee
//     does, and keeps it shown for DWELL_MS once it has painted (the scene
//     being recorded: a page shown for less than the recording's frame
//     interval may be replaced by the next one, docs/sessions.md). Prints
//     {"visited": [url...]}.
//
//   node recording.js settle CDP_URL FRAMES FINAL
//     Shows a page that repaints on every animation frame, red and blue in
//     turn, FRAMES times, then paints FINAL (a CSS colour) and stops
//     changing; waits 1.5 s (the scene: the page's last picture must be
//     recorded). Prints {"painted": n}.
//
//   node recording.js play CDP_URL REPLAY_URL
//     Opens a replay page (recording.html) in the session's browser, steps
//     its player's slider through every frame and samples the middle pixel
//     of the frame shown, then presses Play and waits until the player
//     reaches the last frame. Prints {"frames", "info", "samples":
//     [{"rgb", "url", "count", "time"}], "note", "played"}.
const { chromium } = require('playwright-core');

async function page(browser) {
  const context = browser.contexts()[0] || (await browser.newContext());
  return context.pages()[0] || (await context.newPage());
}

async function drive(cdpUrl, dwell, urls) {
  const browser = await chromium.connectOverCDP(cdpUrl);
  const p = await page(browser);
  const visited = [];
  for (const url of urls) {
    await p.goto(url);
    // Painted: two animation frames after load.
    await p.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    await p.waitForTimeout(dwell);
    visited.push(p.url());
  }
  return { visited };
}

async function settle(cdpUrl, frames, final) {
  const browser = await chromium.connectOverCDP(cdpUrl);
  const p = await page(browser);
  await p.setContent('<!doctype html><body style="margin:0;height:100vh"></body>');
  const painted = await p.evaluate(
    ([frames, final]) =>
      new Promise((done) => {
        let n = 0;
        const step = () => {
          if (n === frames) {
            document.body.style.background = final;
            requestAnimationFrame(() => requestAnimationFrame(() => done(n)));
            return;
          }
          document.body.style.background = n % 2 ? '#0000ff' : '#ff0000';
          n += 1;
          requestAnimationFrame(step);
        };
        requestAnimationFrame(step);
      }),
    [frames, final],
  );
  await p.waitForTimeout(1500);
  return { painted };
}

async function play(cdpUrl, replayUrl) {
  const browser = await chromium.connectOverCDP(cdpUrl);
  const p = await page(browser);
  await p.goto(replayUrl);
  await p.waitForFunction(() => window.replay !== undefined);
  const frames = await p.evaluate(() => window.replay.frames);
  const info = await p.evaluate(() => window.replay.info);
  const samples = [];
  for (let i = 0; i < frames; i++) {
    // As a person drags the slider.
    await p.$eval('#seek', (el, i) => {
      el.value = String(i);
      el.dispatchEvent(new Event('input'));
    }, i);
    samples.push(
      await p.evaluate(async () => {
        const img = document.getElementById('screen');
        await img.decode();
        const c = document.createElement('canvas');
        c.width = img.naturalWidth;
        c.height = img.naturalHeight;
        const g = c.getContext('2d');
        g.drawImage(img, 0, 0);
        const d = g.getImageData(Math.floor(c.width / 2), Math.floor(c.height / 2), 1, 1).data;
        const text = (id) => document.getElementById(id).textContent;
        return { rgb: [d[0], d[1], d[2]], url: text('url'), count: text('count'), time: text('time') };
      })
    );
  }
  let played = false;
  if (frames > 1) {
    await p.$eval('#seek', (el) => {
      el.value = '0';
      el.dispatchEvent(new Event('input'));
    });
    await p.click('#play');
    await p.waitForFunction((last) => document.body.dataset.frame === String(last), frames - 1, { timeout: 60000 });
    played = (await p.textContent('#play')) === 'Play';
  }
  const note = await p.textContent('#note');
  return { frames, info, samples, note, played };
}

(async () => {
  const [mode, cdpUrl, ...rest] = process.argv.slice(2);
  let out;
  if (mode === 'drive') {
    const [dwell, ...urls] = rest;
    out = await drive(cdpUrl, Number(dwell), urls);
  } else if (mode === 'play') {
    out = await play(cdpUrl, rest[0]);
  } else if (mode === 'settle') {
    out = await settle(cdpUrl, Number(rest[0]), rest[1]);
  } else {
    throw new Error(`unknown mode ${mode}: drive, settle or play`);
  }
  console.log(JSON.stringify(out));
  process.exit(0);
})().catch((e) => {
  console.error(`FAILED: ${e.stack || e}`);
  process.exit(1);
});
