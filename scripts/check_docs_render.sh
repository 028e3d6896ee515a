#!/usr/bin/env bash
# Open the built docs site in headless Chromium and check that pages render: no raw markup
# (Sphinx roles, MyST fences or directives left as text), the navigation sidebar and the
# search box present, and the search page finding a word. Screenshots go to
# docs/_build/screenshots/ (look at them). Usage: make docs-check (builds the site first),
# or scripts/check_docs_render.sh [HTML_DIR]. Needs Debian's chromium
# (apt-get install -y chromium); exits 0 with a SKIP line when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
HTML="${1:-docs/_build/html}"
SHOTS="docs/_build/screenshots"
BROWSER="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$BROWSER" ]; then
    echo "SKIP: chromium is not installed (apt-get install -y chromium); pages not checked"
    exit 0
fi
[ -f "$HTML/index.html" ] || { echo "no site at $HTML: run make docs" >&2; exit 1; }
HTML="$(cd "$HTML" && pwd)"  # absolute, for file:// URLs
mkdir -p "$SHOTS"
PROFILE="$(mktemp -d)"
trap 'rm -rf "$PROFILE"' EXIT
FLAGS=(--headless --no-sandbox --disable-gpu --disable-background-networking --no-first-run
       --user-data-dir="$PROFILE" --hide-scrollbars --window-size=1280,1400)
PAGES=(index install quickstart concepts troubleshooting guide/collectives guide/linear
       guide/pytorch guide/engines reference/cli reference/api/terascale reference/api/linear
       benchmarks/index design/internals changelog)
# DOCS_CHECK_PAGES="index quickstart" checks only those pages; DOCS_CHECK_SEARCH=0 skips the
# search check
if [ -n "${DOCS_CHECK_PAGES:-}" ]; then read -r -a PAGES <<<"$DOCS_CHECK_PAGES"; fi
fail=0
for page in "${PAGES[@]}"; do
    url="file://$HTML/$page.html"
    dom="$(timeout 60 "$BROWSER" "${FLAGS[@]}" --dump-dom "$url" 2>/dev/null)"
    # the text a reader sees: tags dropped, code kept (a literal ``:mod:`` in a code span is
    # fine; outside one it is a role that was not rendered)
    text="$(printf '%s' "$dom" | python3 -c '
import html, re, sys
d = sys.stdin.read()
d = re.sub(r"(?s)<(script|style)\b.*?</\1>", "", d)
d = re.sub(r"(?s)<(code|pre)\b.*?</\1>", " ", d)
print(html.unescape(re.sub(r"<[^>]+>", " ", d)))')"
    problems=()
    grep -qE ':(mod|class|func|meth|attr|data|exc|ref|doc|py:[a-z]+):`' <<<"$text" && problems+=("raw Sphinx role")
    grep -qE '```|\{(toctree|eval-rst|include|py:[a-z]+)\}' <<<"$text" && problems+=("raw MyST markup")
    # smart quotes make the -- of a flag in prose a dash ("--epochs" shown as "–epochs")
    grep -qE '(^|[[:space:](])(–|—)[a-z]' <<<"$text" && problems+=("a flag's -- shown as a dash")
    grep -q 'class="sidebar-tree"' <<<"$dom" || problems+=("no navigation sidebar")
    grep -q 'class="sidebar-search"' <<<"$dom" || problems+=("no search box")
    grep -q '<h1' <<<"$dom" || problems+=("no title")
    timeout 60 "$BROWSER" "${FLAGS[@]}" --screenshot="$SHOTS/${page//\//_}.png" "$url" \
        >/dev/null 2>&1 || problems+=("no screenshot")
    if [ ${#problems[@]} -eq 0 ]; then
        echo "ok    $page"
    else
        echo "FAIL  $page: ${problems[*]}"; fail=1
    fi
done
if [ "${DOCS_CHECK_SEARCH:-1}" = 0 ]; then exit $fail; fi
# search: the page runs the index in JavaScript; give it time, then look for results
url="file://$HTML/search.html?q=allreduce"
dom="$(timeout 60 "$BROWSER" "${FLAGS[@]}" --virtual-time-budget=10000 --dump-dom "$url" 2>/dev/null)"
timeout 60 "$BROWSER" "${FLAGS[@]}" --virtual-time-budget=10000 --screenshot="$SHOTS/search.png" \
    "$url" >/dev/null 2>&1 || true
if grep -q 'Search Results\|search-summary\|class="search"' <<<"$dom" \
        && grep -qi 'communicator' <<<"$dom"; then
    echo "ok    search (allreduce)"
else
    echo "FAIL  search: no results for 'allreduce'"; fail=1
fi
echo "screenshots: $SHOTS/"
exit $fail
