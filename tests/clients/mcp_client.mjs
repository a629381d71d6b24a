// Drives the grid's MCP endpoint with the official TypeScript SDK clients and
// prints one JSON object of what they saw. Called by tests/tests/mcp.rs:
//
//   node mcp_client.mjs URL KEY SDK MODE CALLS_JSON
//
// SDK: `v1` (@modelcontextprotocol/sdk, the handshake-era client most hosts
// embed) or `v2` (@modelcontextprotocol/client, which speaks 2026-07-28).
// MODE (v2 only): `legacy`, `auto` or a version to pin. The key goes in
// `Authorization: Bearer`, as clients that can only set a bearer token send it.
// CALLS_JSON: a list of [tool, arguments]. Each call reports isError, its
// text, its structuredContent, its images and embedded resources; the SDKs
// check structuredContent against the tool's outputSchema themselves and
// throw when it does not fit, which fails the run.

const [url, key, sdk, mode, callsJson] = process.argv.slice(2);

async function clientFor() {
  const headers = { Authorization: `Bearer ${key}` };
  if (sdk === 'v1') {
    const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    const client = new Client({ name: 'grid-tests', version: '1.0.0' });
    return { client, transport: new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }) };
  }
  const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
  const negotiation = mode === 'legacy' || mode === 'auto' ? { mode } : { mode: { pin: mode } };
  const client = new Client({ name: 'grid-tests', version: '1.0.0' }, { versionNegotiation: negotiation });
  return { client, transport: new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }) };
}

async function main() {
  const { client, transport } = await clientFor();
  await client.connect(transport);
  const out = { calls: [] };
  out.serverName = client.getServerVersion()?.name ?? null;
  out.protocolVersion = transport.protocolVersion ?? client.getNegotiatedProtocolVersion?.() ?? null;
  const { tools } = await client.listTools();
  out.tools = tools.map((t) => t.name).sort();
  out.listed = Object.fromEntries(
    tools.map((t) => [t.name, { title: t.title, annotations: t.annotations, hasOutputSchema: !!t.outputSchema }]),
  );
  for (const [name, args] of JSON.parse(callsJson)) {
    const result = await client.callTool({ name, arguments: args });
    out.calls.push({
      tool: name,
      isError: !!result.isError,
      text: result.content.filter((c) => c.type === 'text').map((c) => c.text).join(''),
      structured: result.structuredContent ?? null,
      images: result.content.filter((c) => c.type === 'image').map((c) => ({ mimeType: c.mimeType, data: c.data })),
      resources: result.content.filter((c) => c.type === 'resource').map((c) => c.resource),
    });
  }
  await client.close();
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(`${e?.stack ?? e}\n`);
  process.exit(1);
});
