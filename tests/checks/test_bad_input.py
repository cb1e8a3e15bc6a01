"""Every check given something that is not the function or class its exercise asks for
fails with a message, never with the checks' own exception.

Bug this guards against: ``ch04.check_encoder_block(None)`` raised AttributeError
("'NoneType' object has no attribute '__name__'") from inside the checks, which a
learner reads as the course's bug (38 checks that build a module did so; found while
measuring issue 26's "bad input stays handled").
"""

from __future__ import annotations

import inspect

import pytest
import torch.nn as nn

from tformer_grading import checks
from tformer_grading.checks.diagnosis import CheckFailure


def _one_argument_checks():
    for module in checks.exercise_modules():
        short = module.__name__.split(".checks.", 1)[1]
        for name, fn in sorted(vars(module).items()):
            if not (name.startswith("check_") and inspect.isfunction(fn)):
                continue
            if fn.__module__ != module.__name__:
                continue
            required = [
                p
                for p in inspect.signature(fn).parameters.values()
                if p.default is p.empty and p.kind == p.POSITIONAL_OR_KEYWORD
            ]
            if len(required) == 1:
                yield pytest.param(fn, id=f"{short}.{name}")


@pytest.mark.parametrize("check", list(_one_argument_checks()))
@pytest.mark.parametrize(
    "given", [None, 42, nn.Linear(3, 3)], ids=["None", "int", "instance"]
)
def test_a_check_given_the_wrong_kind_of_thing_says_so(check, given, capfd):
    with pytest.raises(CheckFailure):
        check(given)
    assert capfd.readouterr().err == ""
