"""The API docs page works offline: it loads nothing but files this server serves from the
installed package, without a key, and its Content-Security-Policy lets a browser load
nothing else."""

from __future__ import annotations

import hashlib
from html.parser import HTMLParser

import httpx
import pytest

from tests.integration.helpers import assert_problem

# sha256 of the files of the npm package swagger-ui-dist@5.31.0, which the PyPI package
# swagger-ui-bundle-v2==5.31.0 ships unchanged (checked when it was pinned: `npm pack
# swagger-ui-dist@5.31.0`). A new pin updates these after the same check.
UPSTREAM_SHA256 = {
    "swagger-ui-bundle.js": "93b7b0862a80e2786f85b560be7693c2344354ffa7e7e224f850a54349724c31",
    "swagger-ui.css": "9e576f8322132c76949da47f9bb53c891373c303ea3a761ff548ffc9de50a98c",
}
CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}


class _References(HTMLParser):
    """Every URL the page refers to, and whether it has a script without a src."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline_scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("src", "href", "data-url", "action"):
            if values.get(name):
                self.urls.append(values[name] or "")
        if tag == "script" and not values.get("src"):
            self.inline_scripts += 1


@pytest.mark.parametrize("path", ["/schema", "/schema/swagger"])
async def test_the_page_loads_only_files_this_server_serves(
    anon: httpx.AsyncClient, path: str
) -> None:
    page = await anon.get(path)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    references = _References()
    references.feed(page.text)
    assert references.inline_scripts == 0
    assert "http://" not in page.text
    assert "https://" not in page.text
    assets = [url for url in references.urls if url != "/schema/openapi.json"]
    assert "/schema/openapi.json" in references.urls
    assert {url.rsplit(".", 1)[1] for url in assets} == {"js", "css", "png"}
    for url in references.urls:
        assert url.startswith("/schema/"), url
        answer = await anon.get(url)
        assert answer.status_code == 200, url
        assert answer.content, url
        if url in assets:
            suffix = "." + url.rsplit(".", 1)[1]
            assert answer.headers["content-type"].startswith(CONTENT_TYPES[suffix]), url
            assert "immutable" in answer.headers["cache-control"], url
            name = url.rsplit("/", 1)[1]
            if name in UPSTREAM_SHA256:
                assert hashlib.sha256(answer.content).hexdigest() == UPSTREAM_SHA256[name]


async def test_the_page_may_load_nothing_from_elsewhere(anon: httpx.AsyncClient) -> None:
    policy = (await anon.get("/schema")).headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'"  # no inline script, no other origin
    for name in ("style-src", "img-src", "font-src", "connect-src"):
        sources = directives[name].split()
        assert "'self'" in sources
        assert set(sources) <= {"'self'", "'unsafe-inline'", "data:"}, (name, sources)


async def test_an_unknown_asset_or_page_is_not_found(anon: httpx.AsyncClient) -> None:
    page = (await anon.get("/schema")).text
    known = page.split('<script src="', 1)[1].split('"', 1)[0]
    assert_problem(await anon.get(known.rsplit("/", 1)[0] + "/index.html"), 404)
    # Pages whose files cannot be served from here are not offered at all.
    for page in ("/schema/redoc", "/schema/elements", "/schema/rapidoc"):
        assert (await anon.get(page)).status_code == 404, page
