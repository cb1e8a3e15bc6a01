"""tformer_ref.plotting and tformer_ref.widgets: the figures and explorers the lessons display."""

import io

import numpy as np
import pytest
import torch
from matplotlib.image import AxesImage, imread

from tformer_ref.plotting import attention_heatmaps, attention_png, heads_cost_figure
from tformer_ref.widgets import HeadExplorer, head_explorer


def _weights(n_heads=4, sq=5, sk=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n_heads, sq, sk, generator=g).softmax(dim=-1)  # [H, Sq, Sk]


def _images(ax):
    return [a for a in ax.get_children() if isinstance(a, AxesImage)]


def _decode(png: bytes) -> np.ndarray:
    return imread(io.BytesIO(png), format="png")


# --------------------------------------------------------------------------- attention_heatmaps


def test_heatmaps_one_image_per_head_and_a_colorbar():
    w = _weights(n_heads=4)
    fig = attention_heatmaps(w, list("abcde"), title="t")
    image_axes = [ax for ax in fig.axes if _images(ax)]
    assert len(image_axes) == 4
    assert len(fig.axes) == 5  # 4 maps + the colour bar
    for h, ax in enumerate(image_axes):
        (image,) = _images(ax)
        np.testing.assert_allclose(image.get_array(), w[h].numpy())
        assert ax.get_title() == f"head {h}"
        assert [t.get_text() for t in ax.get_xticklabels()] == list("abcde")
    assert fig._suptitle.get_text() == "t"


def test_heatmaps_share_one_colour_scale():
    w = _weights(n_heads=3)
    fig = attention_heatmaps(w)
    limits = [_images(ax)[0].get_clim() for ax in fig.axes if _images(ax)]
    assert len(limits) == 3
    assert all(lim == (0.0, pytest.approx(float(w.max()))) for lim in limits)


def test_heatmaps_grid_drops_unused_panels():
    fig = attention_heatmaps(
        _weights(n_heads=5), max_cols=4
    )  # a 2 x 4 grid, 3 panels unused
    assert sum(1 for ax in fig.axes if _images(ax)) == 5
    assert len(fig.axes) == 6


def test_heatmaps_accept_one_map_and_cross_attention_labels():
    fig = attention_heatmaps(
        _weights(n_heads=2, sq=3, sk=4)[0], list("abc"), key_tokens=list("wxyz")
    )
    (ax,) = [ax for ax in fig.axes if _images(ax)]
    assert _images(ax)[0].get_array().shape == (3, 4)
    assert [t.get_text() for t in ax.get_xticklabels()] == list("wxyz")
    assert [t.get_text() for t in ax.get_yticklabels()] == list("abc")


def test_heatmaps_reject_bad_shapes_and_labels():
    with pytest.raises(ValueError, match=r"\[H, Sq, Sk\]"):
        attention_heatmaps(torch.rand(1, 2, 3, 3))
    with pytest.raises(ValueError, match="one label per position"):
        attention_heatmaps(_weights(sq=5), list("abc"))


def test_heatmaps_accept_tensors_that_require_grad():
    w = _weights().requires_grad_()
    fig = attention_heatmaps(w)  # detached internally
    assert sum(1 for ax in fig.axes if _images(ax)) == 4


# --------------------------------------------------------------------------- attention_png


def test_attention_png_is_a_png_of_one_map():
    png = attention_png(_weights()[0], list("abcde"), title="head 0")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert _decode(png).ndim == 3
    with pytest.raises(ValueError, match="one map"):
        attention_png(_weights(n_heads=2))


def test_attention_png_depends_on_the_map():
    w = _weights(n_heads=2)
    assert attention_png(w[0], vmax=1.0) != attention_png(w[1], vmax=1.0)
    assert attention_png(w[0], vmax=1.0) == attention_png(w[0].clone(), vmax=1.0)


# --------------------------------------------------------------------------- heads_cost_figure


def test_heads_cost_figure_two_panels_with_the_data():
    heads, ms, mib = (1, 8, 16), [10.0, 11.0, 12.5], [0.5, 4.0, 8.0]
    fig = heads_cost_figure(heads, ms, mib, title="cost")
    assert len(fig.axes) == 2
    ax_time, ax_mem = fig.axes
    (line_time,) = ax_time.get_lines()
    (line_mem,) = ax_mem.get_lines()
    assert (
        list(line_time.get_xdata()) == list(heads) and list(line_time.get_ydata()) == ms
    )
    assert (
        list(line_mem.get_xdata()) == list(heads) and list(line_mem.get_ydata()) == mib
    )
    for ax in (ax_time, ax_mem):
        assert ax.get_xlabel() == "number of heads H"
        assert ax.get_ylabel() and ax.get_title()
        assert ax.get_ylim()[0] == 0
    assert fig._suptitle.get_text() == "cost"


def test_heads_cost_figure_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="same length"):
        heads_cost_figure((1, 8), [1.0], [0.5, 4.0])


# --------------------------------------------------------------------------- head_explorer


def test_explorer_has_one_image_per_head_showing_that_head():
    w = _weights(n_heads=3)
    explorer = head_explorer(w, list("abcde"))
    assert isinstance(explorer, HeadExplorer)
    assert explorer.children == (explorer.slider, explorer.stack)
    assert (explorer.slider.min, explorer.slider.max, explorer.slider.value) == (
        0,
        2,
        0,
    )
    assert len(explorer.images) == 3 and explorer.stack.children == tuple(
        explorer.images
    )
    vmax = float(w.max())
    for h, image in enumerate(explorer.images):
        assert image.format == "png"
        expected = attention_png(w[h], list("abcde"), title=f"head {h}", vmax=vmax)
        assert bytes(image.value) == expected
    assert len({bytes(image.value) for image in explorer.images}) == 3


def test_explorer_slider_selects_the_head_shown():
    explorer = head_explorer(_weights(n_heads=4))
    assert explorer.head == 0
    explorer.slider.value = 2  # what the callback must follow
    assert explorer.stack.selected_index == 2 and explorer.head == 2
    explorer.show_head(3)
    assert explorer.slider.value == 3 and explorer.stack.selected_index == 3
    with pytest.raises(ValueError, match="head must be in 0..3"):
        explorer.show_head(4)


def test_explorer_is_linked_in_the_browser_for_the_static_book():
    explorer = head_explorer(_weights(n_heads=2))
    assert explorer.link.source == (explorer.slider, "value")
    assert explorer.link.target == (explorer.stack, "selected_index")


def test_explorer_state_is_serialisable_widget_state():
    import ipywidgets as widgets

    explorer = head_explorer(_weights(n_heads=2))
    state = widgets.Widget.get_manager_state(drop_defaults=False)["state"]
    for w in (
        explorer,
        explorer.slider,
        explorer.stack,
        explorer.link,
        *explorer.images,
    ):
        assert w.model_id in state
    assert state[explorer.stack.model_id]["state"]["selected_index"] == 0
