"""tformer_grading.pictures.attach: a failure carries the picture of the case its
message names, a passing check draws none, and a picture that cannot be drawn is left
out without hiding the failure."""

import pytest
import torch

from tformer_grading.checks.diagnosis import CheckFailure, fail
from tformer_grading.pictures.attach import masks_picture, pictured, shown_order

CAUSAL = [torch.ones(s, s, dtype=torch.bool).tril()[None, None] for s in (3, 5)]
LABELS = ["size=3", "size=5"]
SHAPES = [(1, 1, 3, 3), (1, 1, 5, 5)]


def _draw(theirs):
    return lambda said: masks_picture(theirs, CAUSAL, LABELS, SHAPES, said)


def test_the_picture_shows_the_case_the_message_names():
    theirs = [torch.ones_like(m) for m in CAUSAL]
    with pytest.raises(CheckFailure) as info, pictured(_draw(theirs)):
        fail("causal_mask", "on case size=5 your mask lets the future in.")
    assert "size=5" in info.value.picture.caption
    assert len(info.value.picture.cells.marked["attends_masked"]) == 10


def test_no_picture_when_the_named_case_has_nothing_to_show():
    theirs = [CAUSAL[0].clone(), torch.ones_like(CAUSAL[1])]
    with pytest.raises(CheckFailure) as info, pictured(_draw(theirs)):
        fail("causal_mask", "on case size=3 your mask has dtype int64.")
    assert info.value.picture is None


def test_a_crash_while_drawing_leaves_the_failure_as_it_was():
    def broken(said):
        raise RuntimeError("boom")

    with pytest.raises(CheckFailure) as info, pictured(broken):
        fail("causal_mask", "wrong.")
    assert info.value.picture is None and "wrong." in str(info.value)


def test_nothing_is_drawn_when_nothing_fails():
    drawn = []
    with pictured(lambda said: drawn.append(said)):
        pass
    assert drawn == []


def test_cases_are_tried_in_the_order_the_message_names_them():
    labels = ["tokens [2, 5]", "tokens [2, 5], pad_id=3", "tokens [4, 6]"]
    assert shown_order(labels, "case tokens [2, 5], pad_id=3: ...") == [1]
    assert shown_order(labels, "nothing named") == [0, 1, 2]


def test_a_picture_that_cannot_be_drawn_is_not_shown(monkeypatch):
    """The PNG is drawn when shown: a failure there leaves the picture out, never the
    diagnosis (IPython would print the error in its place)."""
    import IPython
    from IPython import display as ipython_display

    from tformer_grading.pictures import attach
    from tformer_grading.pictures.attention_maps import Picture

    def broken():
        raise RuntimeError("no backend")

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: type("K", (), {"kernel": 1}))
    monkeypatch.setattr(ipython_display, "display", lambda *a, **k: shown.append(a))
    assert attach.show(Picture(broken, "caption", "alt", None)) is False
    assert shown == []
