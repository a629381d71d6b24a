// A Playwright client and the MCP browser tools on one session at once
// (tests/tests/browser_tools.rs): the tools attach to the client's page
// and detach again, and the client must not take that for its page's end.
//
//   node playwright_beside_tools.mjs CDP_URL MCP_URL KEY SESSION_ID PAGE_URL
//
// Playwright connects, opens PAGE_URL and keeps it; the official TypeScript
// MCP SDK (v1) then snapshots, types into and screenshots that page through
// the tools; Playwright reads the page back afterwards. Prints one JSON
// object: what each side saw, and whether Playwright saw its page close.

import { createRequire } from 'node:module';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const { chromium } = createRequire(import.meta.url)('playwright-core');
const [cdpUrl, mcpUrl, key, sessionId, pageUrl] = process.argv.slice(2);

function text(result) {
  return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
}

async function main() {
  const browser = await chromium.connectOverCDP(cdpUrl);
  const page = await browser.contexts()[0].newPage();
  let closed = false;
  page.on('close', () => (closed = true));
  await page.goto(pageUrl);

  const mcp = new Client({ name: 'grid-tests', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(mcpUrl), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  await mcp.connect(transport);
  const call = async (name, args) => {
    const result = await mcp.callTool({ name, arguments: { sessionId, ...args } });
    if (result.isError) throw new Error(`${name}: ${text(result)}`);
    return result;
  };
  const snapshot = (await call('browser_snapshot', {})).structuredContent.snapshot;
  const ref = /textbox "User name" \[ref=(e\d+)\]/.exec(snapshot)?.[1];
  if (!ref) throw new Error(`no ref for the user name in:\n${snapshot}`);
  await call('browser_type', { ref, text: 'typed by a tool' });
  const shot = await call('browser_take_screenshot', {});
  await mcp.close();

  // The client goes on with the page it kept.
  const typed = await page.evaluate(() => document.getElementById('user').value);
  await page.evaluate(() => (document.getElementById('user').value = 'set by playwright'));
  const title = await page.title();
  const pages = browser.contexts()[0].pages().map((p) => p.url());
  // Before the client's own close, which ends its pages for it.
  const closedBeforeLeaving = closed;
  await browser.close();
  return {
    typed,
    title,
    closed: closedBeforeLeaving,
    pages,
    screenshotTypes: shot.content.filter((c) => c.type === 'image').map((c) => c.mimeType),
  };
}

main().then(
  (out) => console.log(JSON.stringify(out)),
  (e) => {
    console.error(e?.stack ?? e);
    process.exit(1);
  },
);
