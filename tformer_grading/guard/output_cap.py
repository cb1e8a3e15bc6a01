"""An nbgrader ``Execute`` that keeps a bounded amount of each notebook's output.

nbgrader's own ``LimitOutput`` counts lines, and one 100 MB line is one line. Here at
most ``max_output_chars`` characters per cell and ``max_notebook_output_chars`` per
notebook are kept, counted as the kernel sends them and before anything is written:
an output counts as the JSON it would add to the notebook (text, data, display
metadata, exception names, messages and tracebacks alike). Streams are cut; errors
are cut but stay errors (so the cell still scores 0); other outputs past the cap and
display updates past it are dropped (an update is charged to the cell running when
it arrives). Receipt lines are kept beyond the cap, and the cell says how much was
dropped. What a notebook brings in (its cells and attachments) is bounded before
grading, by ``preflight.MAX_BYTES``.
"""

from __future__ import annotations

import json

from nbclient.util import run_sync
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import Integer

from .receipts import receipt_lines

_CAPPED = ("stream", "display_data", "execute_result", "error")
# An exception's class name, as kept when its error is cut.
ENAME_KEPT = 200


class CappedExecute(Execute):
    """nbgrader's Execute, keeping at most so many characters of output."""

    max_output_chars = Integer(
        100_000, help="characters of output kept per cell; -1 for no limit"
    ).tag(config=True)
    max_notebook_output_chars = Integer(
        2_000_000, help="characters of output kept per notebook; -1 for no limit"
    ).tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._chars: dict[int, int] = {}
        self._dropped: dict[int, int] = {}
        self._notebook_chars = 0
        self._cell_index = 0
        return super().preprocess(nb, resources, km=km)

    async def async_execute_cell(
        self, cell, cell_index, execution_count=None, store_history=True
    ):
        self._cell_index = cell_index
        try:
            return await super().async_execute_cell(
                cell, cell_index, execution_count, store_history
            )
        finally:  # also when the kernel died in the cell: what came is still capped
            dropped = self._dropped.pop(cell_index, 0)
            if dropped:
                cell.outputs.append(self._dropped_notice(dropped))

    execute_cell = run_sync(async_execute_cell)

    def on_cell_executed(self, **kwargs):
        # nbgrader's hook appends the reply's error when no error output of that name
        # came on iopub, which happens when iopub falls behind the reply (a 20 MB
        # message on a loaded machine): capped here like the iopub one, or one flood
        # kept 40 MB in the notebook.
        cell, outputs = kwargs["cell"], kwargs["cell"].outputs
        before = len(outputs)
        super().on_cell_executed(**kwargs)
        for output in outputs[before:]:
            if output.get("output_type") != "error":
                continue
            msg = {
                "msg_type": "error",
                "content": {
                    "ename": output.get("ename", ""),
                    "evalue": output.get("evalue", ""),
                    "traceback": list(output.get("traceback", [])),
                },
            }
            content = self._capped(msg, kwargs.get("cell_index", self._cell_index))[
                "content"
            ]
            for field in ("ename", "evalue", "traceback"):
                output[field] = content[field]
        return cell

    def _dropped_notice(self, dropped: int):
        text = (
            f"\n[grader: {dropped:,} characters of output dropped; at most "
            f"{self.max_output_chars:,} are kept per cell and "
            f"{self.max_notebook_output_chars:,} per notebook]\n"
        )
        return new_output("stream", name="stdout", text=text)

    def output(self, outs, msg, display_id, cell_index):
        if msg["msg_type"] in _CAPPED:
            msg = self._capped(msg, cell_index)
            if msg is None:
                return None
        return super().output(outs, msg, display_id, cell_index)

    def _update_display_id(self, display_id, msg):
        # An update rewrites an earlier output in place: it counts against the cell
        # running now, like any output, and past the cap it is dropped.
        if self._capped(msg, self._cell_index) is not None:
            super()._update_display_id(display_id, msg)

    def _room(self, cell_index: int) -> int:
        """Characters this cell may still add (the cell's and the notebook's caps)."""
        rooms = []
        if self.max_output_chars >= 0:
            rooms.append(self.max_output_chars - self._chars.get(cell_index, 0))
        if self.max_notebook_output_chars >= 0:
            rooms.append(self.max_notebook_output_chars - self._notebook_chars)
        return max(0, min(rooms)) if rooms else -1

    def _capped(self, msg, cell_index):
        """``msg`` cut to what is left of the output allowance, or None to drop it."""
        content, kind = msg["content"], msg["msg_type"]
        size = output_size(content)
        room = self._room(cell_index)
        self._chars[cell_index] = self._chars.get(cell_index, 0) + size
        # The notebook's allowance counts what is kept, so one flood does not silence
        # the cells after it.
        self._notebook_chars += size if room < 0 else min(size, room)
        if room < 0 or size <= room:
            return msg
        self._dropped[cell_index] = self._dropped.get(cell_index, 0) + size - room
        if kind == "error":  # still an error (the cell scores 0), its message cut
            ename = str(content.get("ename", ""))[:ENAME_KEPT]
            evalue = str(content.get("evalue", ""))[: max(room, 200)]
            cut = {"ename": ename, "evalue": evalue, "traceback": [evalue]}
            return {**msg, "content": cut}
        if kind != "stream":
            self._dropped[cell_index] += room
            return None
        text = str(content.get("text", ""))
        kept, receipts = text[:room], receipt_lines(text[room:])
        if not kept and not receipts:
            return None
        joined = kept + ("\n" if kept and receipts else "") + receipts
        return {
            **msg,
            "content": {"name": content.get("name", "stdout"), "text": joined},
        }


def output_size(content: dict) -> int:
    """Characters ``content`` (a message's) adds to the notebook: its JSON, less what
    Jupyter never stores (``transient``, the display id)."""
    kept = {k: v for k, v in content.items() if k != "transient"}
    return len(json.dumps(kept, ensure_ascii=False, default=str))
