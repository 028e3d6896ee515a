"""The built docs site renders in a real browser: no raw markup, navigation, search.

Runs ``scripts/check_docs_render.sh`` (headless Chromium) on the site ``make docs`` built
(``make test`` builds it first): a page of each kind and the search page here, every page
under ``make docs-check``. Skipped, with the reason, where the site or Chromium is
missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "docs" / "_build" / "html"
SCRIPT = ROOT / "scripts" / "check_docs_render.sh"

pytestmark = [
    pytest.mark.skipif(not (SITE / "index.html").exists(),
                       reason="the docs site is not built (make docs)"),
    pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")),
                       reason="chromium is not installed (apt-get install -y chromium)"),
]


PAGES = "index quickstart guide/collectives reference/cli reference/api/terascale benchmarks/index"


def _check(html: Path, pages: str, search: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DOCS_CHECK_PAGES=pages, DOCS_CHECK_SEARCH="1" if search else "0")
    return subprocess.run(["bash", str(SCRIPT), str(html)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_site_renders() -> None:
    done = _check(SITE, PAGES)
    assert done.returncode == 0 and "FAIL" not in done.stdout, done.stdout + done.stderr
    assert done.stdout.count("ok ") == len(PAGES.split()) + 1  # and the search


def _site_with(tmp_path: Path, html: str) -> Path:
    """A copy of the built site whose quick start has ``html`` just before its title."""
    site = tmp_path / "html"
    shutil.copytree(SITE, site)
    page = site / "quickstart.html"
    text = page.read_text()
    at = text.index("<h1")
    page.write_text(text[:at] + html + text[at:])
    return site


def test_check_catches_raw_markup(tmp_path: Path) -> None:
    done = _check(_site_with(tmp_path, "<p>see :mod:`terascale.linear`</p>"), "quickstart",
                  search=False)
    assert done.returncode == 1 and "FAIL  quickstart: raw Sphinx role" in done.stdout, \
        done.stdout


def test_check_catches_a_flag_shown_as_a_dash(tmp_path: Path) -> None:
    done = _check(_site_with(tmp_path, "<p>e.g. python train.py \u2013epochs 3</p>"),
                  "quickstart", search=False)
    assert done.returncode == 1 and "FAIL  quickstart: a flag's -- shown as a dash" in done.stdout, \
        done.stdout
