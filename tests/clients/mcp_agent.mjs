// A scripted agent (no model) on the official TypeScript MCP SDK: the same
// task as tests/mcp/agent.py, signing in to the test site and placing an
// order through snapshot refs only. Called by tests/tests/browser_tools.rs:
//
//   node mcp_agent.mjs MCP_URL KEY SDK MODE SITE_URL
//
// SDK `v1` (@modelcontextprotocol/sdk) or `v2` (@modelcontextprotocol/client,
// MODE `legacy` or `auto`). Prints one JSON object of what it saw; the SDK
// checks every structuredContent against the tool's outputSchema.

const [url, key, sdk, mode, site] = process.argv.slice(2);

async function clientFor() {
  const headers = { Authorization: `Bearer ${key}` };
  if (sdk === 'v1') {
    const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    return { client: new Client({ name: 'grid-agent', version: '1.0.0' }), transport: new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }) };
  }
  const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
  const client = new Client({ name: 'grid-agent', version: '1.0.0' }, { versionNegotiation: { mode } });
  return { client, transport: new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }) };
}

function findRef(snapshot, role, name) {
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const m = new RegExp(`- ${role} "${escaped}"[^\\n]*\\[ref=(e\\d+)\\]`).exec(snapshot);
  if (!m) throw new Error(`no ${role} "${name}" in the snapshot:\n${snapshot}`);
  return m[1];
}

async function main() {
  const { client, transport } = await clientFor();
  await client.connect(transport);
  const out = {};
  const call = async (name, args, expectError = false) => {
    const result = await client.callTool({ name, arguments: args });
    const text = result.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
    if (!!result.isError !== expectError) throw new Error(`${name} ${JSON.stringify(args)}: isError ${result.isError}: ${text}`);
    return { structured: result.structuredContent ?? {}, text, images: result.content.filter((c) => c.type === 'image') };
  };
  const sid = (await call('lease_session', { ttlMinutes: 5 })).structured.sessionId;
  let page = await call('browser_navigate', { sessionId: sid, url: `${site}/shop/signin` });
  let snap = page.structured.snapshot;
  await call('browser_type', { sessionId: sid, ref: findRef(snap, 'textbox', 'User name'), text: 'grace' });
  await call('browser_type', { sessionId: sid, ref: findRef(snap, 'textbox', 'Password'), text: 'secret', submit: true });
  const home = await call('browser_wait_for', { sessionId: sid, text: 'Signed in as grace' });
  out.signedIn = home.structured.title;
  const product = await call('browser_click', { sessionId: sid, ref: findRef(home.structured.snapshot, 'link', 'Blue teapot') });
  snap = product.structured.snapshot;
  await call('browser_select_option', { sessionId: sid, ref: findRef(snap, 'combobox', 'Quantity'), values: ['2'] });
  const cart = await call('browser_click', { sessionId: sid, ref: findRef(snap, 'button', 'Add to cart') });
  snap = cart.structured.snapshot;
  await call('browser_type', { sessionId: sid, ref: findRef(snap, 'textbox', 'Note'), text: 'leave at door' });
  await call('browser_press_key', { sessionId: sid, key: 'Tab' });
  const done = await call('browser_click', { sessionId: sid, ref: findRef(snap, 'button', 'Place order') });
  out.doneUrl = done.structured.url;
  out.doneSnapshot = done.structured.snapshot;
  const shot = await call('browser_take_screenshot', { sessionId: sid });
  out.screenshot = shot.images.map((i) => i.mimeType);
  out.evaluated = (await call('browser_evaluate', { sessionId: sid, expression: 'location.pathname' })).structured.result;
  // A file the agent holds, a tab opened and closed, the page's console.
  snap = (await call('browser_navigate', { sessionId: sid, url: `${site}/shop/extras` })).structured.snapshot;
  const receipt = /- button "Receipt"[^\n]*\[ref=(e\d+)\]/.exec(snap)?.[1] ?? findRef(snap, 'textbox', 'Receipt');
  await call('browser_file_upload', { sessionId: sid, ref: receipt,
    files: [{ name: 'note.csv', contentBase64: Buffer.from('a,b\n1,2').toString('base64'), mimeType: 'text/csv' }] });
  await call('browser_wait_for', { sessionId: sid, text: 'Chosen: note.csv' });
  out.chosen = (await call('browser_evaluate', { sessionId: sid, expression: "document.getElementById('chosen').textContent" })).structured.result;
  out.console = (await call('browser_console_messages', { sessionId: sid, onlyErrors: true })).structured.result;
  out.tabsAfterNew = (await call('browser_tabs', { sessionId: sid, action: 'new', url: `${site}/page/2` })).structured.result;
  out.tabsAfterClose = (await call('browser_tabs', { sessionId: sid, action: 'close', index: 1 })).structured.result;
  await call('release_session', { sessionId: sid });
  out.afterRelease = (await call('browser_navigate', { sessionId: sid, url: `${site}/page/1` }, true)).text;
  await client.close();
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(`${e?.stack ?? e}\n`);
  process.exit(1);
});
