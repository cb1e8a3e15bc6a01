"""Chapter 3 graded with the real nbgrader CLI: generate -> autograde -> feedback.

One autograde run grades a small class: the solution, the untouched student version,
and one buggy submission per diagnosed pitfall. Each must score exactly what it
deserves, and the feedback must name the pitfall.
"""

import html
import re

import pytest

from course import Buggy, GradedChapter, feedback_text

CHAPTER = "ch03_masks"
FULL = {
    "test_causal_mask": 2,
    "test_padding_mask": 2,
    "test_masked_attention": 4,
    "test_masked_attention_half": 2,
    "test_masked_attention_by_hand": 1,
    "test_mask_probes": 2,
}

# triu instead of tril: each query sees itself and the future, not the past.
CAUSAL_TRIU = """
def causal_mask(size):
    return torch.triu(torch.ones(size, size, device=device)).bool()[None, None]
"""
# PyTorch's convention (True = masked out), not the course's (True = attend).
CAUSAL_IGNORE = """
def causal_mask(size):
    future = torch.ones(1, 1, size, size, dtype=torch.bool, device=device)
    return future.triu(diagonal=1)
"""
# [B, 1, S] broadcasts against [B, H, Sq, Sk] with the batch on the heads axis.
PADDING_WRONG_AXIS = """
def padding_mask(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(1)
"""
# The mask zeroes weights after the softmax: the kept weights no longer sum to 1.
MASKED_AFTER_SOFTMAX = """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.softmax(-1).masked_fill(~mask, 0.0)
    return weights @ v, weights
"""
# Fills where the mask is True: the keys to attend to are the ones hidden.
MASKED_INVERTED = """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.masked_fill(mask, torch.finfo(scores.dtype).min).softmax(-1)
    return weights @ v, weights
"""
# -inf fill: a query whose keys are all masked gets softmax(-inf, ..., -inf) = NaN.
MASKED_MINUS_INF = """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.masked_fill(mask == 0, float('-inf')).softmax(-1)
    return weights @ v, weights
"""
# -1e9 fill: right in float32, but it overflows to -inf in float16.
MASKED_MINUS_1E9 = """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.masked_fill(mask == 0, -1e9).softmax(-1)
    return weights @ v, weights
"""
# Right weights, but PyTorch computes the output: only the hidden by-hand test tells.
CALLS_SDPA = """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.masked_fill(~mask, -1e4).softmax(-1)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out, weights
"""

# The by-hand cell scores only when masked_attention behaves right: the judge
# (tformer_grading/judge/registry.py) runs check_masked_attention in its place.
MASK_CELLS = (
    "test_masked_attention",
    "test_masked_attention_half",
    "test_masked_attention_by_hand",
)
BUGGY = {
    "causal_triu": Buggy(
        answers={"causal_mask": CAUSAL_TRIU},
        zero=("test_causal_mask", "test_mask_probes"),
        feedback="'triu instead of tril'",
    ),
    "causal_ignore_convention": Buggy(
        answers={"causal_mask": CAUSAL_IGNORE},
        zero=("test_causal_mask", "test_mask_probes"),
        feedback="'mask inverted'",
    ),
    "padding_wrong_axis": Buggy(
        answers={"padding_mask": PADDING_WRONG_AXIS},
        zero=("test_padding_mask", "test_mask_probes"),
        feedback="'mask broadcast over the wrong axis'",
    ),
    "after_softmax": Buggy(
        answers={"masked_attention": MASKED_AFTER_SOFTMAX},
        zero=(*MASK_CELLS, "test_mask_probes"),
        feedback="'mask applied after softmax'",
    ),
    "inverted": Buggy(
        answers={"masked_attention": MASKED_INVERTED},
        zero=(*MASK_CELLS, "test_mask_probes"),
        feedback="'mask inverted'",
    ),
    "minus_inf": Buggy(
        answers={"masked_attention": MASKED_MINUS_INF},
        zero=MASK_CELLS,
        feedback="'NaN on fully masked rows'",
    ),
    "minus_1e9": Buggy(
        answers={"masked_attention": MASKED_MINUS_1E9},
        zero=("test_masked_attention_half",),
        feedback="'fill value that overflows in half precision'",
    ),
    "calls_sdpa": Buggy(
        answers={"masked_attention": CALLS_SDPA},
        zero=("test_masked_attention_by_hand",),
        feedback="calls scaled_dot_product_attention",
    ),
}


# One autograde run per chapter, on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHAPTER)]


class TestGrading(GradedChapter):
    chapter, full, buggy = CHAPTER, FULL, BUGGY
    hidden_marker, hidden_student = "check_masked_attention_by_hand", "calls_sdpa"
    pictures = True  # test_the_feedback_page_shows_the_checks_picture

    def test_the_feedback_page_shows_the_checks_picture(self, graded, tmp_path):
        """The picture the causal-mask check drew in the graded kernel is in the
        learner's page, inside it (a data: image), with its caption and alt text; in a
        browser it shows, no wider than the page, at desktop and phone width."""
        course, _ = graded
        page = course / "feedback" / "causal_triu" / CHAPTER / "exercise.html"
        text = page.read_text()
        figure = re.search(r'<figure class="tformer-picture">(<img [^>]*>)', text)
        assert figure, "no picture in the page"
        attributes = dict(re.findall(r'(\w+)="([^"]*)"', figure[1]))
        assert attributes["src"].startswith("data:image/png;base64,")
        assert html.unescape(attributes["alt"]).startswith("Two mask maps")
        assert "case size=7, batch 0, head 0" in feedback_text(
            course, CHAPTER, "causal_triu"
        )
        from browser import chromium, console_errors, require_chromium, wait_for

        from book import SCREENSHOTS

        require_chromium()
        with chromium(tmp_path / "chromium") as driver:
            for width in (1280, 390):
                driver.set_window_size(width, 1000)
                driver.get(page.as_uri())
                wait_for(driver, IMAGE_LOADED, what="the picture to load")
                shown = driver.execute_script(PICTURE)
                assert shown["natural"] == 650 and 0 < shown["width"] <= width, shown
                assert shown["page"] <= width and console_errors(driver) == []
                if width == 1280:
                    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                    driver.execute_script(
                        "document.querySelector('figure.tformer-picture')"
                        ".scrollIntoView({block: 'start'})"
                    )
                    driver.save_screenshot(str(SCREENSHOTS / "feedback_picture.png"))


IMAGE_LOADED = "return document.querySelector('figure.tformer-picture img').complete"
PICTURE = """
const img = document.querySelector('figure.tformer-picture img');
return {natural: img.naturalWidth, width: img.getBoundingClientRect().width,
        page: document.documentElement.scrollWidth};
"""
