"""Tries an agent host's MCP configuration before the host does: reads the
grid's entry from one of the files here (or your own copy), connects the way
the host would with the official MCP Python SDK, lists the tools and calls
`grid_status`.

    pip install "mcp>=2.3"
    export GRID_API_KEY=grid_...          # replaces the file's placeholder key
    export GRID_URL=http://127.0.0.1:8080 # optional: replaces the file's address
    python3 examples/mcp/try_config.py examples/mcp/cursor.mcp.json

Prints one JSON object: the URL and header names used, how many tools the grid
lists, and the grid_status result. Exits non-zero when the call fails.
"""

import asyncio
import json
import os
import re
import sys
from urllib.parse import urlsplit

from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

# What the example files hold instead of a key.
PLACEHOLDERS = ("grid_YOUR_API_KEY", "${input:grid-api-key}")


def entry_of(config):
    """The server entry: `mcpServers` (Claude, Cursor) or `servers` (VS Code), named `grid`."""
    servers = config.get("mcpServers") or config.get("servers") or {}
    if "grid" not in servers:
        sys.exit("no server named grid in the file")
    return servers["grid"]


def url_and_headers(entry):
    """A remote entry names its url and headers; an mcp-remote bridge (Claude
    Desktop) has them in its arguments, with ${VAR} taken from its env."""
    if "url" in entry:
        return entry["url"], dict(entry.get("headers", {}))
    args = entry.get("args", [])
    url = next(a for a in args if a.startswith(("http://", "https://")))
    headers = {}
    for flag, value in zip(args, args[1:]):
        if flag == "--header":
            value = re.sub(r"\$\{(\w+)\}", lambda m: entry.get("env", {}).get(m[1], ""), value)
            name, _, value = value.partition(":")
            headers[name.strip()] = value.strip()
    return url, headers


def localized(url, headers):
    """The file's address and placeholder key replaced by GRID_URL and GRID_API_KEY."""
    if os.environ.get("GRID_URL"):
        url = os.environ["GRID_URL"].rstrip("/") + urlsplit(url).path
    key = os.environ.get("GRID_API_KEY")
    for name, value in headers.items():
        for placeholder in PLACEHOLDERS:
            if placeholder in value:
                if not key:
                    sys.exit("set GRID_API_KEY: the file holds a placeholder key")
                headers[name] = value.replace(placeholder, key)
    return url, headers


async def main(path):
    with open(path, encoding="utf-8") as f:
        url, headers = localized(*url_and_headers(entry_of(json.load(f))))
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            tools = await client.list_tools()
            result = await client.call_tool("grid_status", {})
    if result.is_error:
        sys.exit("grid_status failed: " + "".join(c.text for c in result.content if c.type == "text"))
    print(json.dumps({
        "url": url,
        "headers": sorted(headers),
        "tools": len(tools.tools),
        "grid_status": result.structured_content,
    }))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: try_config.py CONFIG_JSON")
    asyncio.run(main(sys.argv[1]))
