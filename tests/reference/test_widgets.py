"""tformer_ref.widgets.PictureSlider and PictureGrid: explorers of precomputed
pictures that respond in the static book, where the browser (jslink), not a kernel,
switches the picture."""

import io

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.image import imread

from tformer_ref.plotting import attention_png
from tformer_ref.widgets import PictureGrid, PictureSlider, figure_png


def _decode(png) -> np.ndarray:
    return imread(io.BytesIO(bytes(png)), format="png")


def _map_png(k: int) -> bytes:
    """A picture that differs with k: a one-hot [4, 4] attention map."""
    return attention_png(
        torch.eye(4).roll(k, dims=1), title=f"state {k}", vmax=1.0, dpi=40
    )


def _bars_png(rows: int, cols: int) -> bytes:
    fig = Figure(figsize=(2, 1.5))
    fig.subplots().bar(range(3), [rows, cols, rows + cols])
    return figure_png(fig, dpi=40)


def _all_differ(pngs) -> bool:
    """No two pictures decode to the same pixels."""
    arrays = [_decode(p) for p in pngs]
    return all(
        a.shape != b.shape or not np.array_equal(a, b)
        for i, a in enumerate(arrays)
        for b in arrays[i + 1 :]
    )


def _model_state(widget):
    import ipywidgets as widgets

    return widgets.Widget.get_manager_state(drop_defaults=False)["state"][
        widget.model_id
    ]["state"]


# ----------------------------------------------------------------------- PictureSlider


def test_slider_has_one_picture_per_state_and_they_differ():
    pngs = [_map_png(k) for k in range(4)]
    explorer = PictureSlider(["a", "b", "c", "d"], pngs, description="k", index=2)
    assert explorer.children == (explorer.slider, explorer.stack)
    assert explorer.slider.options == ("a", "b", "c", "d")
    assert explorer.stack.children == tuple(explorer.images)
    assert [bytes(image.value) for image in explorer.images] == pngs
    assert all(image.format == "png" for image in explorer.images)
    assert _all_differ(pngs)
    assert (explorer.slider.index, explorer.stack.selected_index) == (2, 2)


def test_slider_is_jslinked_to_the_stack():
    explorer = PictureSlider(["a", "b"], [_map_png(0), _map_png(1)])
    assert explorer.link.source == (explorer.slider, "index")
    assert explorer.link.target == (explorer.stack, "selected_index")
    # The saved widget state, which the static book loads, holds the link.
    link = _model_state(explorer.link)
    assert link["source"] == [f"IPY_MODEL_{explorer.slider.model_id}", "index"]
    assert link["target"] == [f"IPY_MODEL_{explorer.stack.model_id}", "selected_index"]
    # In a kernel, code that moves the slider moves the picture too.
    explorer.slider.index = 1
    assert explorer.stack.selected_index == 1


def test_slider_rejects_bad_arguments():
    with pytest.raises(ValueError, match="one picture per state"):
        PictureSlider(["a", "b", "c"], [_map_png(0), _map_png(1)])
    with pytest.raises(ValueError, match="at least one state"):
        PictureSlider([], [])
    with pytest.raises(ValueError, match="labels must differ"):
        PictureSlider(["a", "a"], [_map_png(0), _map_png(1)])
    with pytest.raises(ValueError, match=r"index must be in 0\.\.1, got 2"):
        PictureSlider(["a", "b"], [_map_png(0), _map_png(1)], index=2)


# ------------------------------------------------------------------------- PictureGrid


def _grid(**kwargs) -> tuple[PictureGrid, list[list[bytes]]]:
    pngs = [[_bars_png(r, c) for c in range(3)] for r in range(2)]
    return PictureGrid(["off", "on"], ["0", "1", "2"], pngs, **kwargs), pngs


def test_grid_has_one_picture_per_state_and_they_differ():
    grid, pngs = _grid(row=1, column=2)
    assert grid.children == (grid.buttons, grid.slider, grid.stack)
    assert grid.buttons.options == ("off", "on")
    assert grid.slider.options == ("0", "1", "2")
    assert grid.stack.children == tuple(grid.rows)
    assert [[bytes(i.value) for i in row.children] for row in grid.rows] == pngs
    assert _all_differ([p for row in pngs for p in row])
    assert grid.state == (1, 2)


def test_grid_controls_are_jslinked_to_the_stacks():
    grid, _ = _grid()
    outer, *inner = grid.links
    assert outer.source == (grid.buttons, "index")
    assert outer.target == (grid.stack, "selected_index")
    assert [link.source for link in inner] == [(grid.slider, "index")] * 2
    assert [link.target for link in inner] == [
        (row, "selected_index") for row in grid.rows
    ]
    for link in grid.links:
        state = _model_state(link)
        assert state["source"][0] == f"IPY_MODEL_{link.source[0].model_id}"
        assert state["target"][0] == f"IPY_MODEL_{link.target[0].model_id}"
    grid.buttons.index, grid.slider.index = 1, 2
    assert grid.state == (1, 2)
    assert all(row.selected_index == 2 for row in grid.rows)


def test_grid_rejects_bad_arguments():
    pngs = [[_bars_png(r, c) for c in range(3)] for r in range(2)]
    with pytest.raises(ValueError, match="rows: one picture per state"):
        PictureGrid(["off", "on", "maybe"], ["0", "1", "2"], pngs)
    with pytest.raises(ValueError, match="row 1: one picture per state"):
        PictureGrid(["off", "on"], ["0", "1", "2"], [pngs[0], pngs[1][:2]])
    with pytest.raises(
        ValueError, match=r"must be in \(0\.\.1, 0\.\.2\), got \(0, 3\)"
    ):
        PictureGrid(["off", "on"], ["0", "1", "2"], pngs, column=3)
