"""tformer_grading.pictures.attention: the picture reads at the notebook's width (the
book's figure rules), says in its caption what it marks, lists the cells in its alt
text, and draws without a warning, a word on stderr or a change to the learner's
matplotlib settings."""

import io
import struct
import warnings

import torch

from tformer_grading.pictures.attention_maps import WINDOW, draw_mask, draw_weights
from tformer_ref.plotting import COLUMN_PX, FIGURE_DPI

CAUSAL = torch.ones(6, 6, dtype=torch.bool).tril()


def _size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


def test_the_picture_fits_the_column_and_says_what_it_marks(capsys):
    import matplotlib

    before = dict(matplotlib.rcParams)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        picture = draw_mask(torch.ones(6, 6, dtype=torch.bool), CAUSAL, where="size=6")
    width, height = _size(picture.png)
    assert width <= COLUMN_PX and 200 <= height <= 400, (width, height)
    assert "15 cells let the query attend a key it must not" in picture.caption
    assert "(query 0, key 1)" in picture.alt and "7 more" in picture.alt
    assert capsys.readouterr().err == ""
    assert dict(matplotlib.rcParams) == before
    assert FIGURE_DPI == 100  # the sizes above are in pixels at the book's dpi


def test_a_large_map_is_drawn_as_a_window_around_its_first_mark():
    size = 40
    keep = torch.ones(size, size, dtype=torch.bool).tril()
    wrong = keep.clone()
    wrong[30, 31] = True
    picture = draw_mask(wrong, keep, where="size=40")
    assert picture.cells.marked["attends_masked"] == [(30, 31)]
    assert _size(picture.png)[0] <= COLUMN_PX
    assert WINDOW < size


def test_weights_caption_names_rows_and_marks():
    right = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    mine = torch.tensor([[0.5, 0.0], [0.5, 0.5]])
    picture = draw_weights(mine, right, CAUSAL[:2, :2], where="case c")
    assert "◀ Row 0 of yours sums to 0.5, not 1." in picture.caption
    assert picture.alt.startswith("Two weights maps side by side.")


def test_the_bundle_carries_the_picture_its_alt_text_and_caption():
    picture = draw_mask(torch.ones(3, 3, dtype=torch.bool), CAUSAL[:3, :3], where="s")
    data, metadata = picture.bundle()
    assert data["text/plain"] == picture.caption
    assert data["image/png"] in data["text/html"]
    assert 'alt="Two mask maps side by side.' in data["text/html"]
    assert "<figcaption>" in data["text/html"]
    assert metadata["image/png"]["alt"] == picture.alt
    assert len(io.BytesIO(picture.png).getvalue()) < 100_000


def _text_sizes(monkeypatch) -> list:
    """Every drawn text's size in points, of the figures saved while it is in use."""
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    sizes, save = [], Figure.savefig

    def recording(fig, *args, **kwargs):
        sizes.extend(
            t.get_fontsize()
            for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip()
        )
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording)
    return sizes


def test_no_label_is_smaller_than_the_books_small_print(monkeypatch):
    from tformer_grading.pictures import training_curves
    from tformer_ref.plotting import SMALLEST_FONT_PT

    sizes = _text_sizes(monkeypatch)
    draw_mask(torch.ones(6, 6, dtype=torch.bool), CAUSAL, where="size=6").png
    w = torch.rand(4, 5).softmax(-1)
    draw_weights(w.flip(0), w, where="case c").png
    runs = training_curves.train("train_step", _zero_never, steps=10)
    training_curves.draw(runs).png
    assert len(sizes) > 30 and min(sizes) >= SMALLEST_FONT_PT, sorted(set(sizes))


def _zero_never(model, src, tgt, optimizer, scheduler, max_norm, pad_id, smoothing):
    from tformer_ref import training

    model.train()
    tgt_in, labels = training.shift_targets(tgt)
    loss = training.sequence_loss(model(src, tgt_in), labels, pad_id, smoothing)
    loss.backward()
    optimizer.step()
    return loss.item(), 0.0
