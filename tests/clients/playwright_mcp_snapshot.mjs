// Playwright MCP (@playwright/mcp, the field's reference for browser tools)
// reading a page, for the side-by-side checks of the grid's own tools:
// Playwright MCP runs as its users run it (stdio, the official MCP SDK as
// its client) on the same browser, connected to a grid session's cdpUrl.
// Called by tests/tests/browser_tools.rs and the browser-tools bench:
//
//   node playwright_mcp_snapshot.mjs CDP_URL PAGE_URL ROUNDS OUT_DIR
//
// Navigates to PAGE_URL, then takes ROUNDS snapshots (browser_snapshot),
// timing each. Prints one JSON object: {snapshot, bytes, ms: [..]}.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { createRequire } from 'node:module';
import path from 'node:path';

const [cdpUrl, pageUrl, rounds, outDir] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const cli = path.join(path.dirname(require.resolve('@playwright/mcp/package.json')), 'cli.js');

// The snapshot's own text: Playwright MCP answers markdown around it.
function snapshotOf(result) {
  const text = result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
  const m = /```yaml\n([\s\S]*?)\n```/.exec(text);
  if (!m) throw new Error(`no snapshot in Playwright MCP's answer:\n${text}`);
  return m[1];
}

async function main() {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [cli, '--cdp-endpoint', cdpUrl, '--output-dir', outDir],
    env: { ...process.env, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: '1' },
    stderr: 'inherit',
  });
  const client = new Client({ name: 'grid-side-by-side', version: '1.0.0' });
  await client.connect(transport);
  const nav = await client.callTool({ name: 'browser_navigate', arguments: { url: pageUrl } });
  if (nav.isError) throw new Error(`browser_navigate: ${JSON.stringify(nav.content)}`);
  const ms = [];
  let snapshot = '';
  for (let i = 0; i < Number(rounds); i++) {
    const t = performance.now();
    const r = await client.callTool({ name: 'browser_snapshot', arguments: {} });
    ms.push(performance.now() - t);
    if (r.isError) throw new Error(`browser_snapshot: ${JSON.stringify(r.content)}`);
    snapshot = snapshotOf(r);
  }
  await client.close();
  process.stdout.write(JSON.stringify({ snapshot, bytes: Buffer.byteLength(snapshot), ms }));
}

main().catch((e) => {
  process.stderr.write(`${e?.stack ?? e}\n`);
  process.exit(1);
});
