"""A scripted agent (no model) that drives a leased browser through the
grid's MCP browser tools with the official Python MCP SDK, reading only the
snapshots' refs. Called by tests/tests/browser_tools.rs:

    python3 agent.py MCP_URL API_KEY MODE SITE_URL

MODE as in client.py (`legacy`, `auto`). SITE_URL is the test target's
address; the agent signs in to {SITE_URL}/shop/signin as ada, opens the
product, chooses three with gift wrap, adds to the cart, leaves a note and
places the order, then checks what a tool may not do. Prints one JSON
object of what it saw; every tool result is also checked against its
output schema by the SDK.
"""

import asyncio
import base64
import json
import re
import sys

from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


def find_ref(snapshot: str, role: str, name: str) -> str:
    """The ref of the first line `- role "name" ... [ref=eN]`."""
    pattern = re.compile(r'- ' + re.escape(role) + r' "' + re.escape(name) + r'"[^\n]*\[ref=(e\d+)\]')
    m = pattern.search(snapshot)
    if not m:
        raise AssertionError(f"no {role} {name!r} in the snapshot:\n{snapshot}")
    return m.group(1)


async def main(url: str, key: str, mode: str, site: str) -> None:
    out = {"steps": []}
    async with create_mcp_http_client(headers={"x-api-key": key}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            out["protocolVersion"] = client.protocol_version

            async def call(name, args, expect_error=False):
                result = await client.call_tool(name, args)
                text = "".join(c.text for c in result.content if c.type == "text")
                step = {"tool": name, "isError": bool(result.is_error), "text": text,
                        "structured": result.structured_content,
                        "images": [c.mime_type for c in result.content if c.type == "image"],
                        "imageData": [c.data for c in result.content if c.type == "image"]}
                out["steps"].append({k: v for k, v in step.items() if k != "imageData"})
                if bool(result.is_error) != expect_error:
                    raise AssertionError(f"{name} {args}: isError {result.is_error}: {text}")
                return step

            lease = await call("lease_session", {"ttlMinutes": 5})
            sid = lease["structured"]["sessionId"]
            out["sessionId"] = sid
            # 1. Sign in.
            page = await call("browser_navigate", {"sessionId": sid, "url": f"{site}/shop/signin"})
            snap = page["structured"]["snapshot"]
            await call("browser_type", {"sessionId": sid, "ref": find_ref(snap, "textbox", "User name"), "text": "ada"})
            await call("browser_type", {"sessionId": sid, "ref": find_ref(snap, "textbox", "Password"),
                                        "text": "secret", "submit": True})
            home = await call("browser_wait_for", {"sessionId": sid, "text": "Signed in as ada"})
            out["signedIn"] = home["structured"]["title"]
            # 2. Open the product.
            product = await call("browser_click", {"sessionId": sid,
                                                   "ref": find_ref(home["structured"]["snapshot"], "link", "Blue teapot")})
            snap = product["structured"]["snapshot"]
            # 3. Choose three, gift wrapped, add to the cart.
            await call("browser_select_option", {"sessionId": sid, "ref": find_ref(snap, "combobox", "Quantity"),
                                                 "values": ["Three"]})
            await call("browser_fill_form", {"sessionId": sid,
                                             "fields": [{"ref": find_ref(snap, "checkbox", "Gift wrap"), "value": "true"}]})
            cart = await call("browser_click", {"sessionId": sid, "ref": find_ref(snap, "button", "Add to cart")})
            out["cartTitle"] = cart["structured"]["title"]
            # 4. Leave a note.
            snap = cart["structured"]["snapshot"]
            await call("browser_fill_form", {"sessionId": sid,
                                             "fields": [{"ref": find_ref(snap, "textbox", "Note"), "value": "ring twice"}]})
            # 5. Place the order.
            done = await call("browser_click", {"sessionId": sid, "ref": find_ref(snap, "button", "Place order")})
            out["doneUrl"] = done["structured"]["url"]
            placed = await call("browser_wait_for", {"sessionId": sid, "text": "Order placed: 3 teapots"})
            out["doneSnapshot"] = placed["structured"]["snapshot"]
            value = await call("browser_evaluate", {"sessionId": sid, "expression": "document.querySelector('p').textContent"})
            out["evaluated"] = value["structured"]["result"]
            shot = await call("browser_take_screenshot", {"sessionId": sid})
            out["screenshot"] = shot["imageData"][0] if shot["imageData"] else None
            out["screenshotType"] = shot["images"]
            # Upload a file the agent holds, drag and drop, read the console and
            # the requests.
            extras = await call("browser_navigate", {"sessionId": sid, "url": f"{site}/shop/extras"})
            snap = extras["structured"]["snapshot"]
            out["extrasSnapshot"] = snap
            receipt = re.search(r'- button "Receipt"[^\n]*\[ref=(e\d+)\]', snap)
            receipt = receipt.group(1) if receipt else find_ref(snap, "textbox", "Receipt")
            await call("browser_file_upload", {"sessionId": sid, "ref": receipt, "files": [
                {"name": "receipt.txt", "contentBase64": base64.b64encode(b"paid in full").decode(), "mimeType": "text/plain"}]})
            chosen = await call("browser_wait_for", {"sessionId": sid, "text": "Chosen: receipt.txt"})
            out["chosen"] = (await call("browser_evaluate", {"sessionId": sid,
                                                           "expression": "document.getElementById('chosen').textContent"}))["structured"]["result"]
            snap = chosen["structured"]["snapshot"]
            await call("browser_drag", {"sessionId": sid, "startRef": find_ref(snap, "button", "Teapot card"),
                                        "endRef": find_ref(snap, "region", "Drop zone")})
            await call("browser_wait_for", {"sessionId": sid, "text": "Dropped: Teapot"})
            console = await call("browser_console_messages", {"sessionId": sid})
            out["console"] = console["structured"]["result"]
            out["consoleText"] = console["text"]
            out["consoleErrors"] = (await call("browser_console_messages", {"sessionId": sid, "onlyErrors": True}))["structured"]["result"]
            network = await call("browser_network_requests", {"sessionId": sid})
            out["network"] = network["structured"]["result"]
            out["networkText"] = network["text"]
            await call("browser_navigate_back", {"sessionId": sid})
            # Back, and tabs.
            back = await call("browser_navigate_back", {"sessionId": sid})
            out["backTitle"] = back["structured"]["title"]
            opened = await call("browser_tabs", {"sessionId": sid, "action": "new", "url": f"{site}/page/3"})
            out["tabsAfterNew"] = opened["structured"]["result"]
            closed = await call("browser_tabs", {"sessionId": sid, "action": "close"})
            out["tabsAfterClose"] = closed["structured"]["result"]
            # What a tool may not do.
            refused = await call("browser_navigate", {"sessionId": sid, "url": "file:///etc/passwd"}, expect_error=True)
            out["fileRefused"] = refused["text"]
            stale = await call("browser_click", {"sessionId": sid, "ref": "e999999"}, expect_error=True)
            out["staleRef"] = stale["text"]
            bad = await call("browser_click", {"sessionId": sid}, expect_error=True)
            out["badArguments"] = bad["text"]
            # Released: nothing more.
            await call("release_session", {"sessionId": sid})
            gone = await call("browser_snapshot", {"sessionId": sid}, expect_error=True)
            out["afterRelease"] = gone["text"]
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]))
