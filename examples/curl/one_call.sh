#!/usr/bin/env bash
# One request, one file: POST /screenshot, /pdf and /content with curl.
#
#   export GRID_URL=http://127.0.0.1:8080 GRID_API_KEY=grid_...
#   examples/curl/one_call.sh https://example.com/ [OUT_DIR]
#
# Writes OUT_DIR/page.png, page.pdf and page.html (OUT_DIR defaults to .) and
# prints, per file, the item that made it and what it was charged (the
# answer's x-grid-job-id and x-grid-charged-micros headers). A refusal is JSON
# ({"error": ...}): curl's --fail-with-body prints it and the script stops.
# For a grid serving HTTPS under its own certificate, set GRID_CA_CERT.
set -euo pipefail

url="${1:?usage: one_call.sh URL [OUT_DIR]}"
out="${2:-.}"
grid="${GRID_URL:-http://127.0.0.1:8080}"
: "${GRID_API_KEY:?set GRID_API_KEY to your API key}"
tls=()
if [ -n "${GRID_CA_CERT:-}" ]; then tls=(--cacert "$GRID_CA_CERT"); fi

# capture ROUTE BODY FILE: POSTs BODY to ROUTE, the answer's bytes to FILE.
capture() {
    local route="$1" body="$2" file="$3"
    curl -sS --fail-with-body "${tls[@]}" -X POST "$grid$route" \
        -H "x-api-key: $GRID_API_KEY" -H 'content-type: application/json' \
        -d "$body" -o "$file" -D "$file.headers" || { cat "$file" >&2; echo >&2; exit 1; }
    local job charged
    job="$(sed -n 's/^x-grid-job-id: *//Ip' "$file.headers" | tr -d '\r')"
    charged="$(sed -n 's/^x-grid-charged-micros: *//Ip' "$file.headers" | tr -d '\r')"
    rm -f "$file.headers"
    echo "$file: $(wc -c < "$file") bytes, item $job, charged $charged micro-euros"
}

mkdir -p "$out"
# The screenshot: PNG by default; the capture script's options sit beside url.
capture /screenshot "{\"url\": \"$url\", \"viewport\": {\"width\": 1280, \"height\": 800}}" "$out/page.png"
# The page printed: A4 paper, backgrounds included.
capture /pdf "{\"url\": \"$url\", \"format\": \"A4\", \"printBackground\": true}" "$out/page.pdf"
# The DOM after the page's scripts ran.
capture /content "{\"url\": \"$url\"}" "$out/page.html"
