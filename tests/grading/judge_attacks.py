"""Attacks on the checks that run beside the learner's code, each an answer cell as a
determined learner types it, under a wrong answer.

split_heads and merge_heads are judged outside the kernel (tformer_grading/judge/):
a cell scores only when the judge's own run of its checks passes. Each attack here
makes the kernel's run pass, or tries to, or attacks the judge's handle into the
kernel itself; under it sits a wrong answer, so any point on its cell is a point the
judge failed to stop. They are graded in tests/grading/hostile.py's class, in the
sandbox, with honest learners after them, and graded again in
tests/grading/test_judge_attacks.py.
"""

from learners import MERGE_NO_TRANSPOSE, MHA_STANDALONE, SPLIT_NO_TRANSPOSE

# The wrong answers under the attacks on the checks (no transpose: a view with the
# heads third), and the right ones under the attacks on the judge's handle: the
# kernel's checks pass them, so the judge asks the kernel, and is answered badly.
WRONG_SPLIT, WRONG_MERGE = SPLIT_NO_TRANSPOSE, MERGE_NO_TRANSPOSE
RIGHT_SPLIT = """
def split_heads(x, n_heads):
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads).transpose(1, 2)
"""
RIGHT_MERGE = """
def merge_heads(x):
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh)
"""

# Right when the kernel's checks compare it with the reference, its own code when
# they look at how it computes (delegation.py) or when anything else calls it.
SNIFFS_THE_CHECKS = """
import sys
from tformer_ref.heads import split_heads as _theirs

def split_heads(x, n_heads):
    files, frame = [], sys._getframe(1)
    while frame is not None:
        files.append(frame.f_code.co_filename)
        frame = frame.f_back
    checked = any("tformer_grading/checks" in f for f in files)
    if checked and not any("delegation" in f for f in files):
        return _theirs(x, n_heads)
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads)
"""

# The same trick on a module: a MultiHeadAttention that attends only while the
# kernel's checks run it, and otherwise returns its query (no attention at all).
_ATTENDS = "        b, sq, d = query.shape\n"
SNIFFING_MHA = "import sys\n" + MHA_STANDALONE.replace(
    _ATTENDS,
    """        frame, checked = sys._getframe(1), False
        while frame is not None:
            checked = checked or "tformer_grading/checks" in frame.f_code.co_filename
            frame = frame.f_back
        if not checked:
            return query
"""
    + _ATTENDS,
)

# A TorchFunctionMode left on for the rest of the notebook: every comparison the
# checks make says "equal".
FUNCTION_MODE = (
    """
import torch
from torch.overrides import TorchFunctionMode

class Agree(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("equal", "allclose"):
            return True
        return func(*args, **(kwargs or {}))

Agree().__enter__()
"""
    + WRONG_SPLIT
)

# A trace hook (and, below, a profile hook) that tells the answer when the kernel's
# checks compare it with the reference: it answers with the reference's result then,
# and with its own otherwise (when the checks look at how it computes, in
# delegation.py, and when anything else calls it).
_TELLS = """
import sys
from tformer_ref.heads import split_heads as _theirs

_compared = [False]

def _watch(frame, event, arg):
    if event == "call":
        name = frame.f_code.co_filename
        if "tformer_grading/checks" in name and "delegation" not in name:
            _compared[0] = True
        elif "tformer_grading" in name or "<" not in name:
            _compared[0] = _compared[0] and "tformer_grading" not in name

def split_heads(x, n_heads):
    if _compared[0]:
        return _theirs(x, n_heads)
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads)
"""
SETTRACE = _TELLS + "\nsys.settrace(_watch)\n"
SETPROFILE = _TELLS + "\nsys.setprofile(_watch)\n"

# torch's comparisons and the reference replaced by ones that agree with this answer.
PATCHED = (
    WRONG_SPLIT
    + """
import torch, torch.testing, tformer_ref.heads
torch.equal = lambda *args, **kwargs: True
torch.allclose = lambda *args, **kwargs: True
torch.testing.assert_close = lambda *args, **kwargs: None
tformer_ref.heads.split_heads = split_heads
"""
)

# A tensor whose comparisons, allclose, == and truth all say "equal".
LYING_SUBCLASS = """
import torch

class Agreeable(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("equal", "allclose"):
            return True
        return super().__torch_function__(func, types, args, kwargs)

    def __eq__(self, other):
        return True

    def __bool__(self):
        return True

def split_heads(x, n_heads):
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads).as_subclass(Agreeable)
"""

# Not a tensor at all: an object with the right shape that agrees with everything.
NOT_A_TENSOR = """
import torch

class Looks:
    def __init__(self, *shape):
        self.shape = torch.Size(shape)
        self.dtype, self.device = torch.float32, torch.device("cpu")
    def __eq__(self, other):
        return True
    def __getattr__(self, name):
        return lambda *args, **kwargs: self
    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

def merge_heads(x):
    b, h, s, dh = x.shape
    return Looks(b, s, h * dh)
"""

# The right shape, NaN everywhere; and a billion elements that take no memory.
NAN = """
def merge_heads(x):
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh) * float("nan")
"""
HUGE = """
import torch

def merge_heads(x):
    return torch.zeros(1).expand(1_000_000_000)
"""

# The answer itself sends the judge's kind of message too, whoever calls it.
FORGED_IN_FUNCTION = """
from IPython.display import publish_display_data
import tformer_grading.judge.agent as agent

def split_heads(x, n_heads):
    publish_display_data({agent.MIME: '{"value": {"$": "ref", "id": 1, '
                          '"kind": "object", "type": "Tensor"}}'})
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads).transpose(1, 2)
"""

# The kernel's side of the judge's handle replaced: it answers with a tensor of a
# trillion elements and no data.
AGENT_MALFORMED = (
    """
from IPython.display import publish_display_data
import tformer_grading.judge.agent as agent

def serve(request):
    publish_display_data({agent.MIME: '{"value": {"$": "tensor", "dtype": "float32", '
                          '"shape": [1048576, 1048576], "device": "cpu", '
                          '"requires_grad": false, "data": ""}}'})

agent.serve = serve
"""
    + RIGHT_MERGE
)

# ... answers twice (the honest answer and a forged one) ...
AGENT_TWICE = (
    """
from IPython.display import publish_display_data
import tformer_grading.judge.agent as agent

_serve = agent.serve

def serve(request):
    _serve(request)
    publish_display_data({agent.MIME: '{"value": null}'})

agent.serve = serve
"""
    + RIGHT_SPLIT
)

# ... answers with 40 MB, past the grader's 32 MB per message ...
AGENT_OVERSIZED = (
    """
from IPython.display import publish_display_data
import tformer_grading.judge.agent as agent

def serve(request):
    publish_display_data({agent.MIME: "x" * 40_000_000})

agent.serve = serve
"""
    + RIGHT_MERGE
)

# ... never answers (it sleeps through the cell's time limit) ...
AGENT_SLOW = (
    """
import time
import tformer_grading.judge.agent as agent

def serve(request):
    time.sleep(3600)

agent.serve = serve
"""
    + RIGHT_SPLIT
)

# ... or kills the kernel while the judge waits.
AGENT_DIES = (
    """
import os
import tformer_grading.judge.agent as agent

def serve(request):
    os._exit(3)

agent.serve = serve
"""
    + RIGHT_MERGE
)

# The receipt key read from the checks' memory, and every check of chapter 1 replaced
# by one that prints a success line signed with it. The judge ignores receipts, and it
# judges every cell of chapter 1: each scores what the judge measures (hostile.py).
# In the chapters whose modules it does not judge yet, the key still signs: the limit
# book/instructors.md states.
KEY_SEARCH = (
    WRONG_SPLIT
    + """
from tformer_grading.checks import ch01
from tformer_grading.guard import receipts

count, key = (c.cell_contents for c in receipts.sign.__closure__)

def forged(*args, **kwargs):
    count[0] += 1
    line = "✓ check: matches the reference"
    print(f"{line}  [grader receipt {count[0]}:"
          f"{receipts.receipt_mac(key[0], count[0], line)}]")

for name in dir(ch01):
    if name.startswith("check_"):
        setattr(ch01, name, forged)
"""
)
