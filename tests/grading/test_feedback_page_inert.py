"""A feedback page runs nothing of the learner's, and still shows their work (issue 32,
item 3).

Bug: a feedback page is a web page a stranger wrote, opened by the learner and by
whoever grades the class. Issue 32 found a learner's ``<script>``, ``onerror=`` and
HTML outputs copied into it and run; a cleaner (guard/feedback_html.py) has since
escaped them. Measured then, in a browser, on the page of tests/grading/
feedback_attacks.py's notebook: no payload ran, but an "isolated" HTML output was put
in a frame, a web image in a markdown cell was fetched as the page opened (who read it,
and when, sent to its owner), an image by a relative path read a file beside the page,
a pasted image (a cell attachment) did not show, a widget showed nothing, and a
markdown cell or output naming an attachment its cell lacks (or naming one
percent-encoded, "my%20plot.png") stopped generate_feedback: no page at all. The page
had no Content-Security-Policy, so whatever got past the cleaner would run.
Cause: nbconvert's template frames isolated outputs, the cleaner allowed web and
relative images but not the ``data:`` images attachments become, and nbconvert raises
on a missing attachment.
Guard: tformer_grading/feedback_page.py (its module docstring): the cleaner shows
images only from inside the page, the template cleans every output and frames none,
attachments are checked, and the page opens with a policy that runs only its own
scripts, by hash. The browser tests open the real page (nbgrader autograde and
generate_feedback) in a headless Chromium with the network closed; a positive control
shows the probe sees payloads that run.
"""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path

import pytest
from course import autograde, make_course, nbgrader, released, solution_sources, submit
from feedback_attacks import (
    CLICK,
    MARKDOWN,
    PASTED,
    PAYLOADS,
    PROBE,
    SHOWN,
    attack_notebook,
    png,
)

from tformer_grading.feedback_page import (
    content_security_policy,
    page_attachments,
    page_head,
    script_hash,
)

CHAPTER = "ch01_shapes"

# The markdown payloads that are HTML as written: the controls put them in the page raw,
# as a cleaner that let them through would.
RAW_HTML = {n: s for n, s in MARKDOWN.items() if "<" in s}
# Of those, the ones a browser runs when nothing stops them (the positive control).
RUN_WHEN_RAW = {
    "md_script",
    "md_img_onerror",
    "md_svg_onload",
    "md_svg_script",
    "md_iframe_srcdoc",
    "md_html_js_link",  # when clicked
    "md_mouseover",  # when hovered
    "md_details_ontoggle",
}


# --------------------------------------------------------------- attachments, policy


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def test_a_pasted_image_is_kept_and_one_named_but_missing_says_so():
    plot = {"image/png": b64(png(2, 2))}
    kept = page_attachments(
        "![a](attachment:a.png) ![b](attachment:my%20b.png) ![c](attachment:gone.png)",
        {"a.png": plot, "my b.png": plot},
    )
    assert kept["a.png"] == kept["my b.png"] == kept["my%20b.png"] == plot
    missing = base64.b64decode(kept["gone.png"]["image/svg+xml"]).decode()
    assert "image not in the notebook: gone.png" in missing


def test_an_attachment_that_is_no_picture_is_not_shown():
    kept = page_attachments(
        "![x](attachment:x.png)",
        {
            "x.png": {"text/html": b64(b"<script>alert(1)</script>")},
            "y.png": {"image/png": "not base64 <script>"},
            "z.png": "a string where a bundle goes",
        },
    )
    assert set(kept) == {"x.png"} and "image/svg+xml" in kept["x.png"]  # the notice


def test_the_policy_names_each_script_by_hash_and_allows_nothing_else():
    policy = content_security_policy(["a()", "b()"])
    directives = dict(d.split(" ", 1) for d in policy.split("; "))
    assert directives == {
        "default-src": "'none'",
        "script-src": f"{script_hash('a()')} {script_hash('b()')}",
        "style-src": "'unsafe-inline'",
        "img-src": "data:",
        "base-uri": "'none'",
        "form-action": "'none'",
    }
    # The hash a browser computes: sha256 of the script's text, in base64.
    assert script_hash("") == "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"


def test_the_policy_is_the_first_thing_in_head_and_the_icon_font_goes():
    head = (
        '<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8" />\n<style>'
        "@font-face{font-family:'Glyphicons Halflings';src:url(../fonts/g.woff)}"
        "p{color:red}</style>\n</head>"
    )
    out = page_head(head, "default-src 'none'")
    first = out.split("<head>\n", 1)[1].split("\n", 1)[0]
    assert first == (
        '<meta http-equiv="Content-Security-Policy" '
        'content="default-src &#x27;none&#x27;">'
    )
    assert "Glyphicons" not in out and "p{color:red}" in out
    # Without LearnerFeedback's policy, the page runs no script at all.
    assert "script-src &#x27;none&#x27;" in page_head(head)


# ---------------------------------------------------------------- the real page


@pytest.fixture(scope="module")
def attack_page(tmp_path_factory) -> Path:
    """The feedback page of tests/grading/feedback_attacks.py's learner, from the real
    nbgrader CLI: autograde (in the course's sandbox where it starts: the outputs are
    what the learner's code displays there), then generate_feedback."""
    course = make_course(tmp_path_factory.mktemp("inert"), CHAPTER)
    answers = solution_sources(CHAPTER)
    answers["split_heads"] = (
        "# I reshape, then swap the axes\n" + answers["split_heads"]
    )
    learner = attack_notebook(released(course, CHAPTER), answers)
    submit(course, CHAPTER, "mallory", learner)
    autograde(course, CHAPTER)
    nbgrader(course, "generate_feedback", CHAPTER, "--force")
    page = course / "feedback" / "mallory" / CHAPTER / "exercise.html"
    assert page.is_file(), "generate_feedback wrote no page"
    return page


def inline_scripts(page: str) -> list[str]:
    """The text of each script of ``page`` that a browser would run."""
    found = re.findall(r"<script\b([^>]*)>(.*?)</script>", page, flags=re.DOTALL)
    return [body for attrs, body in found if "application/octet-stream" not in attrs]


@pytest.mark.slow
def test_the_real_pages_policy_names_exactly_its_own_scripts(attack_page):
    page = attack_page.read_text()
    policy = re.search(
        r'<head>\s*<meta (?:content="([^"]*)" http-equiv="Content-Security-Policy"|'
        r'http-equiv="Content-Security-Policy" content="([^"]*)")',
        page,
    )
    assert policy, "the page does not open its <head> with its policy"
    script_src = re.search(r"script-src ([^;]*)", (policy[1] or policy[2]))[1]
    scripts = inline_scripts(page)
    assert len(scripts) == 2  # MathJax's configuration and its loader
    mathjax = (
        Path(__file__).parents[2] / "_vendor/mathjax-3.2.2/tex-svg.js"
    ).read_text()
    assert script_src.split() == [script_hash(s) for s in [*scripts, mathjax]]


def inject(page: Path, name: str, *, keep_policy: bool) -> Path:
    """A copy of ``page`` with :data:`RAW_HTML` written raw at the end of its body (a
    cleaner that failed) and, unless ``keep_policy``, without its policy."""
    text = page.read_text()
    if not keep_policy:
        text, found = re.subn(r"<meta[^>]*Content-Security-Policy[^>]*>", "", text)
        assert found == 1
    text = text.replace("</body>", "\n".join(RAW_HTML.values()) + "\n</body>", 1)
    copy = page.with_name(name)
    copy.write_text(text)
    return copy


def sent_outside(driver) -> list[str]:
    """The requests to other hosts the browser sent since the last call: those it asked
    for (browser.requested_urls) less those a Content-Security-Policy blocked."""
    import json

    from browser import outside_requests

    asked, blocked = {}, set()
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        method = message.get("method")
        if method == "Network.requestWillBeSent":
            asked[params["requestId"]] = params["request"]["url"]
        elif method == "Network.loadingFailed" and params.get("blockedReason") == "csp":
            blocked.add(params["requestId"])
    return outside_requests(u for r, u in asked.items() if r not in blocked)


def open_and_probe(driver, page: Path) -> dict:
    """What ran on ``page`` once its maths is typeset and its links are clicked."""
    from browser import console_errors, open_typeset

    open_typeset(driver, page)
    clicked = driver.execute_script(CLICK)
    time.sleep(0.5)  # a clicked javascript: link runs after the click returns
    seen = driver.execute_script(PROBE)
    seen["clicked"] = clicked
    seen["outside"] = sent_outside(driver)
    seen["console"] = console_errors(driver)
    return seen


@pytest.fixture(scope="module")
def seen(attack_page) -> dict[str, dict]:
    """The probe's findings on the real page and on the two controls, in one browser."""
    from browser import chromium

    started = time.perf_counter()
    pages = {
        "page": attack_page,
        "raw": inject(attack_page, "raw.html", keep_policy=False),
        "policy": inject(attack_page, "policy.html", keep_policy=True),
    }
    with chromium(attack_page.parent / ".chromium") as driver:
        found = {which: open_and_probe(driver, page) for which, page in pages.items()}
    assert time.perf_counter() - started < 60
    return found


@pytest.mark.slow
@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_payload_runs_on_the_real_page(seen, payload):
    assert payload not in seen["page"]["ran"], f"{payload} ran on the feedback page"


@pytest.mark.slow
def test_nothing_of_the_learners_acts_on_the_real_page_without_a_script(seen):
    page = seen["page"]
    assert page["handlers"] == [] and page["clicked"] == []  # nothing left to trigger
    assert page["frames"] == 0 and page["forms"] == 0
    assert page["base"] == page["url"] and page["hash"] == ""  # no <base>, no refresh
    assert page["style_import"] == "" and page["outside"] == []
    assert page["metas"] == 1  # the page's own policy
    assert page["console"] == []


@pytest.mark.slow
def test_the_real_page_shows_the_learners_work(seen):
    page = seen["page"]
    for text in SHOWN:
        assert text in page["text"], text
    images = page["images"]
    for alt, name in (("my plot", "pasted.png"), ("my other plot", "my plot.png")):
        assert images[alt] == ["data:image/png;", *PASTED[name]], alt
    for missing in ("copied", "their plot"):  # a cell's, an output's: said missing
        assert images[missing][:2] == ["data:image/svg+", 360], missing
    for gone in ("tracker", "my js plot"):  # a web image, a script: their text only
        assert images[gone][0] == "", gone
    assert page["svgs"] == [40]  # the SVG output, drawn as an image
    assert page["maths"] >= 4 and page["math_errors"] == 0


@pytest.mark.slow
def test_the_probe_sees_payloads_that_run(seen):
    """Positive control: the same markup written raw into the page, without its
    policy, runs and acts."""
    raw = seen["raw"]
    assert set(raw["ran"]) == RUN_WHEN_RAW
    assert (
        raw["frames"] == 3 and raw["forms"] == 1 and raw["hash"] == "#md_meta_refresh"
    )
    assert raw["base"].startswith("https://attacker.example/")
    assert raw["style_import"] == "1"
    # The stylesheet it imports, and its images, now looked for on <base>'s host.
    assert "https://attacker.example/x.css" in raw["outside"]


@pytest.mark.slow
def test_the_policy_alone_stops_what_a_cleaner_let_through(seen):
    """The same raw markup with the page's policy: no script runs, nothing loads from
    outside, no <base> applies, and the page's MathJax still typesets. (A refresh and
    an inline style are the cleaner's to stop: a policy does not forbid them.)"""
    policy = seen["policy"]
    assert policy["ran"] == [] and policy["outside"] == []
    assert not policy["base"].startswith("https:")
    assert policy["maths"] >= 4 and policy["math_errors"] == 0
