"""A failed check shows its picture in the notebook, above the diagnosis: what
JupyterLab renders and what nbgrader keeps in the graded notebook for the feedback
page. A passing check shows none, and nothing reaches stderr (nbgrader would give the
cell 0).

The cells run in a real IPython kernel (nbclient), as in JupyterLab."""

import nbformat
import pytest
from nbclient import NotebookClient

SETUP = """import torch
from tformer_grading.checks import ch03
"""
WRONG = """def causal_mask(size):
    return torch.ones(size, size, dtype=torch.bool).triu()[None, None]

ch03.check_causal_mask(causal_mask)"""
RIGHT = """def causal_mask(size):
    return torch.ones(size, size, dtype=torch.bool).tril()[None, None]

ch03.check_causal_mask(causal_mask)"""


@pytest.fixture(scope="module")
def outputs():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in (SETUP, WRONG, RIGHT)]
    NotebookClient(nb, timeout=120, allow_errors=True, kernel_name="python3").execute()
    return [cell.outputs for cell in nb.cells]


def test_a_failed_check_shows_its_picture_above_the_diagnosis(outputs):
    wrong = outputs[1]
    kinds = [o.output_type for o in wrong]
    assert kinds[-1] == "error" and "display_data" in kinds, kinds
    picture = next(o for o in wrong if "image/png" in o.get("data", {}))
    assert kinds.index("display_data") < kinds.index("error")
    html = picture.data["text/html"]
    assert '<img src="data:image/png;base64,' in html and 'alt="Two mask maps' in html
    assert "<figcaption>Your mask (left) and the right one (right), case size=7" in html
    assert picture.metadata["image/png"]["alt"].startswith("Two mask maps")
    assert "'triu instead of tril'" in wrong[-1].evalue
    assert not [o for o in wrong if o.get("name") == "stderr"]


def test_a_passing_check_shows_no_picture(outputs):
    right = outputs[2]
    assert [o.output_type for o in right] == ["stream"]
    assert right[0].name == "stdout" and "✓ causal_mask" in right[0].text
