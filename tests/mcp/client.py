"""Drives the grid's MCP endpoint with the official Python MCP SDK's
streamable HTTP client. Called by tests/tests/mcp.rs:

    python3 client.py URL API_KEY MODE CALLS_JSON

MODE is the SDK's connect mode: `legacy` (the initialize handshake), `auto`
(probe server/discover, fall back to initialize) or a modern version to pin
(`2026-07-28`). The key is sent as `x-api-key`. CALLS_JSON is a list of
[tool, arguments]. Prints one JSON object: the protocol version in use, the
server's name, the tools with their input schemas, annotations and whether
they have an output schema, and for each call its isError flag, text,
structuredContent, images and embedded resources. The SDK checks
structuredContent against the tool's outputSchema and raises when it does
not fit, which fails the run.
"""

import asyncio
import json
import sys

from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True) if model is not None else None


async def main(url: str, key: str, mode: str, calls: list) -> None:
    out = {"calls": []}
    async with create_mcp_http_client(headers={"x-api-key": key}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            out["protocolVersion"] = client.protocol_version
            out["serverName"] = client.server_info.name if client.server_info else None
            tools = await client.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            out["schemas"] = {t.name: t.input_schema for t in tools.tools}
            out["listed"] = {
                t.name: {"title": t.title, "annotations": dump(t.annotations), "hasOutputSchema": t.output_schema is not None}
                for t in tools.tools
            }
            for name, args in calls:
                result = await client.call_tool(name, args)
                content = result.content
                out["calls"].append(
                    {
                        "tool": name,
                        "isError": bool(result.is_error),
                        "text": "".join(c.text for c in content if c.type == "text"),
                        "structured": result.structured_content,
                        "images": [{"mimeType": c.mime_type, "data": c.data} for c in content if c.type == "image"],
                        "resources": [dump(c.resource) for c in content if c.type == "resource"],
                    }
                )
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])))
