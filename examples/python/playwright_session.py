"""Leases a browser session over plain HTTP and drives it with Playwright.

    pip install playwright            # no `playwright install`: the grid has the browser
    export GRID_URL=http://127.0.0.1:8080 GRID_API_KEY=grid_...
    python3 examples/python/playwright_session.py https://example.com/

Prints the session id, then `title: ...` of the page, and releases the session
however the browser part ended. GRID_CA_CERT names a CA to trust for a grid
serving HTTPS under its own certificate (the grid's calls only).
"""

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request

from playwright.sync_api import sync_playwright

GRID_URL = os.environ.get("GRID_URL", "http://127.0.0.1:8080").rstrip("/")
API_KEY = os.environ.get("GRID_API_KEY") or sys.exit("set GRID_API_KEY to your API key")
TLS = ssl.create_default_context(cafile=os.environ.get("GRID_CA_CERT") or None)


def grid(method, path, body=None):
    """One call of the grid's API; the answer's JSON (None for 204)."""
    request = urllib.request.Request(
        GRID_URL + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"x-api-key": API_KEY, "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, context=TLS) as answer:
            text = answer.read()
    except urllib.error.HTTPError as e:
        sys.exit(f"{method} {path}: {e.code} {e.read().decode(errors='replace')}")
    return json.loads(text) if text else None


def wait_running(session_id, within=90):
    """Polls GET /sessions until the session runs (its browser started and attested)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        mine = [s for s in grid("GET", "/sessions") if s["sessionId"] == session_id]
        if not mine:
            sys.exit(f"session {session_id} ended before it ran")
        if mine[0]["status"] == "running":
            return
        time.sleep(0.25)
    sys.exit(f"session {session_id} not running within {within} s")


def main(page_url):
    # Billed for the time the browser is ready, up to ttlMinutes; released below.
    lease = grid("POST", "/sessions", {"ttlMinutes": 5})
    session_id = lease["sessionId"]
    print(f"session {session_id}", flush=True)
    try:
        wait_running(session_id)
        with sync_playwright() as p:
            browser = p.chromium.connect_over_cdp(lease["cdpUrl"])
            page = browser.contexts[0].new_page()
            page.goto(page_url)
            print(f"title: {page.title()}", flush=True)
            page.close()
            browser.close()  # disconnects; the session's browser keeps running until released
    finally:
        grid("DELETE", f"/sessions/{session_id}")
        print(f"released {session_id}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: playwright_session.py URL")
    main(sys.argv[1])
