"""An nbgrader preprocessor that zeroes test cells whose checks did not really run.

Placed after :class:`~tformer_grading.guard.execute.GuardedExecute` in
``Autograde.autograde_preprocessors``; it reads the receipt key that
``GuardedExecute`` leaves in ``resources``. A graded test cell that raised
nothing but shows fewer valid receipts than the check calls in its (restored)
source gets an error output, so nbgrader scores it 0: its checks were replaced,
skipped or silenced by the notebook's code. A cell the judge decided
(:mod:`tformer_grading.judge`) needs no receipt: its points were measured outside the
kernel.
"""

from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

from .execute import JUDGED_KEY, RESOURCE_KEY, error_output, graded_test_cell
from .receipts import expected_receipts, valid_receipts


def _stdout(cell) -> str:
    return "".join(
        o.get("text", "")
        for o in cell.outputs
        if o.output_type == "stream" and o.name == "stdout"
    )


class VerifyReceipts(NbGraderPreprocessor):
    """Each check call of a graded test cell must have printed a validly signed success
    line."""

    def preprocess(self, nb, resources):
        key = resources.get(RESOURCE_KEY)
        if not key:
            raise RuntimeError(
                "VerifyReceipts runs after GuardedExecute, which hands it the key "
                "(see nbgrader_config.py)"
            )
        judged = resources.get(JUDGED_KEY, set())
        seen: set[int] = set()
        for cell in nb.cells:
            if not graded_test_cell(cell):
                continue
            if any(o.output_type == "error" for o in cell.outputs):
                continue  # already scores 0
            if cell.metadata["nbgrader"].get("grade_id") in judged:
                continue  # its points are the judge's (tformer_grading.judge)
            numbers = {n for n in valid_receipts(_stdout(cell), key) if n not in seen}
            seen |= numbers
            want = expected_receipts(cell.source)
            if len(numbers) < want:
                cell.outputs.append(
                    error_output(
                        "GradingIntegrityError",
                        f"this test cell makes {want} check call(s) but only "
                        f"{len(numbers)} reported a verified success: its checks "
                        "were replaced, skipped or silenced by the notebook's code. "
                        "It scores 0.",
                    )
                )
        return nb, resources
