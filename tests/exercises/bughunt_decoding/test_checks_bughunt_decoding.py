"""The checks of the bug hunt on the seed's generate_text (assignment ch06_bughunt).

Every learner below is literal code, as typed into the notebook's answer cell, run in a
namespace made like the notebook's setup cell (the seed's create_trg_mask verbatim,
create_src_mask, the token ids). The seed's loop fails every check with its diagnosis; a
loop with one bug fixed passes exactly that bug's check; right fixes written differently
pass every check; realistic wrong fixes are rejected, naming what is wrong.
"""

from __future__ import annotations

import linecache
import textwrap

import pytest
import torch

from tformer_grading.checks import bughunt_decoding as bughunt
from tformer_grading.checks.diagnosis import CheckFailure

CHECKS = {
    "target": bughunt.check_target_mask,
    "device": bughunt.check_mask_device,
    "padding": bughunt.check_source_padding,
}

# The notebook's setup cell, as far as the loop sees it.
SETUP = """
import torch
from tformer_grading.checks.bughunt_decoding import EOS_IDX, PAD_IDX, SOS_IDX


def create_trg_mask(trg):
    N, trg_len = trg.shape
    trg_mask = torch.tril(torch.ones((trg_len, trg_len))).expand(
        N, 1, trg_len, trg_len
    )

    return trg_mask


def create_src_mask(src):
    return (src != PAD_IDX).unsqueeze(1).unsqueeze(2)
"""


def learner(answer: str):
    """The ``generate_text`` an answer cell defines, run like a notebook cell (its
    source known to linecache, so messages can quote its lines)."""
    ns: dict = {}
    for i, source in enumerate((SETUP, textwrap.dedent(answer))):
        name = f"<cell-{abs(hash(answer))}-{i}>"
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        exec(compile(source, name, "exec"), ns)
    return ns["generate_text"]


def verdicts(answer: str) -> dict[str, str | None]:
    """check name -> None when it passes, else its failure message."""
    fn = learner(answer)
    out = {}
    for name, check in CHECKS.items():
        try:
            check(fn)
            out[name] = None
        except CheckFailure as exc:
            out[name] = str(exc)
    return out


# ---------------------------------------------------------------------- the seed's loop

# The seed's generate_text, verbatim (seeds/004, "生成文本").
SEED = """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        # 编码源序列
        enc_src = model.encoder(src, None)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask
            trg_mask = model.decoder.create_trg_mask(trg)

            # 前向传播
            output = model.decoder(trg, enc_src, None, trg_mask)

            # 取最后一个 token 的输出
            next_token = output.argmax(2)[:, -1].item()

            # 拼接到目标序列
            trg = torch.cat([trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1)

            # 如果生成了 <EOS> token，停止生成
            if next_token == EOS_IDX:
                break

    return trg
"""


def seed_with(*changes: tuple[str, str]) -> str:
    """The seed's loop with lines replaced, as a learner edits it in place."""
    code = SEED
    for old, new in changes:
        assert old in code, old
        code = code.replace(old, new)
    return code


# The three fixes, each as a learner would make it on the seed's lines.
FIX_METHOD = (
    "trg_mask = model.decoder.create_trg_mask(trg)",
    "trg_mask = create_trg_mask(trg)",
)
FIX_DEVICE = (
    "trg_mask = model.decoder.create_trg_mask(trg)",
    "trg_mask = model.decoder.create_trg_mask(trg).to(device)",
)
FIX_METHOD_AND_DEVICE = (
    "trg_mask = model.decoder.create_trg_mask(trg)",
    "trg_mask = create_trg_mask(trg).to(device)",
)
FIX_ENCODER_MASK = (
    "enc_src = model.encoder(src, None)",
    "src_mask = create_src_mask(src)\n        enc_src = model.encoder(src, src_mask)",
)
FIX_DECODER_MASK = (
    "output = model.decoder(trg, enc_src, None, trg_mask)",
    "output = model.decoder(trg, enc_src, src_mask, trg_mask)",
)

FIXED = seed_with(FIX_METHOD_AND_DEVICE, FIX_ENCODER_MASK, FIX_DECODER_MASK)


@pytest.fixture(scope="module")
def seed_verdicts():
    return verdicts(SEED)


def test_the_fixed_loop_passes_every_check():
    assert verdicts(FIXED) == {name: None for name in CHECKS}


def test_the_seed_fails_the_target_mask_check_naming_the_missing_method(seed_verdicts):
    message = seed_verdicts["target"]
    assert "create_trg_mask called as a method of model.decoder" in message
    assert "'Decoder' object has no attribute 'create_trg_mask'" in message
    # The learner's line, quoted.
    assert "`trg_mask = model.decoder.create_trg_mask(trg)`" in message
    assert "§6.7 'Greedy and beam decoding'" in message


def test_the_seed_fails_the_device_check_naming_where_its_mask_was_made(seed_verdicts):
    message = seed_verdicts["device"]
    assert "tensor built without a device" in message
    assert (
        "made without a device in create_trg_mask: `trg_mask = "
        "torch.tril(torch.ones((trg_len, trg_len))).expand(`"
    ) in message
    assert "during `output = model.decoder(trg, enc_src, None, trg_mask)`" in message
    assert "§6.7" in message


def test_the_seed_fails_the_padding_check_saying_both_parts_got_none(seed_verdicts):
    message = seed_verdicts["padding"]
    assert "padding in the source attended to" in message
    assert "Your model.encoder call got src_mask=None" in message
    assert "model.decoder calls got src_mask=None" in message
    assert "§3.1 'Padding masks' in book/ch03_masks" in message


# ---------------------------------------------- one bug fixed: exactly its check passes


@pytest.mark.parametrize(
    "fixed, passes",
    [
        (seed_with(FIX_METHOD), "target"),
        (seed_with(FIX_DEVICE), "device"),
        (seed_with(FIX_ENCODER_MASK, FIX_DECODER_MASK), "padding"),
    ],
    ids=["method", "device", "padding"],
)
def test_one_bug_fixed_passes_exactly_its_check(fixed, passes):
    got = verdicts(fixed)
    assert [name for name, message in got.items() if message is None] == [passes]


@pytest.mark.parametrize(
    "left, fails",
    [
        (seed_with(FIX_DEVICE, FIX_ENCODER_MASK, FIX_DECODER_MASK), "target"),
        (seed_with(FIX_METHOD, FIX_ENCODER_MASK, FIX_DECODER_MASK), "device"),
        (seed_with(FIX_METHOD_AND_DEVICE), "padding"),
    ],
    ids=["method", "device", "padding"],
)
def test_one_bug_left_fails_exactly_its_check(left, fails):
    got = verdicts(left)
    assert [name for name, message in got.items() if message is not None] == [fails]


# ------------------------------------------------------ right fixes written differently

RIGHT = {
    # The mask from triu: what lies strictly above the diagonal is the future.
    "triu_bool_with_device": seed_with(
        FIX_ENCODER_MASK,
        FIX_DECODER_MASK,
        (
            "trg_mask = model.decoder.create_trg_mask(trg)",
            "t = trg.size(1)\n"
            "            ones = torch.ones(t, t, device=device)\n"
            "            trg_mask = ~torch.triu(ones, diagonal=1).bool()",
        ),
    ),
    # tril written into a buffer made on the device.
    "tril_out": seed_with(
        FIX_ENCODER_MASK,
        FIX_DECODER_MASK,
        (
            "trg_mask = model.decoder.create_trg_mask(trg)",
            "t = trg.shape[1]\n"
            "            trg_mask = torch.empty(t, t, device=trg.device)\n"
            "            torch.tril(torch.ones(t, t, device=trg.device), out=trg_mask)",
        ),
    ),
    # Key position j <= query position i, from two aranges.
    "arange_comparison": seed_with(
        FIX_ENCODER_MASK,
        FIX_DECODER_MASK,
        (
            "trg_mask = model.decoder.create_trg_mask(trg)",
            "pos = torch.arange(trg.size(1), device=device)\n"
            "            trg_mask = (pos[None, :] <= pos[:, None])[None, None]",
        ),
    ),
    # The seed's function, its result moved to where trg is.
    "moved_to_trg_device": seed_with(
        FIX_ENCODER_MASK,
        FIX_DECODER_MASK,
        (
            "trg_mask = model.decoder.create_trg_mask(trg)",
            "trg_mask = create_trg_mask(trg).to(trg.device)",
        ),
    ),
    # The course's causal_mask, and the mask passed by keyword-free position as before.
    "course_causal_mask": seed_with(
        FIX_ENCODER_MASK,
        FIX_DECODER_MASK,
        (
            "trg_mask = model.decoder.create_trg_mask(trg)",
            "trg_mask = causal_mask(trg.size(1), device=device)",
        ),
    ).replace(
        "def generate_text",
        "from tformer_ref.masks import causal_mask\n\n\ndef generate_text",
    ),
    # A loop rewritten with tensors throughout: torch.full, the next token kept as a
    # tensor.
    "full_and_tensor_tokens": """
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        src_mask = create_src_mask(src)
        enc_src = model.encoder(src, src_mask)
        trg = torch.full((1, 1), SOS_IDX, dtype=torch.long, device=device)
        for _ in range(max_length - 1):
            mask = torch.tril(torch.ones_like(trg[0, :, None] * trg[0, None, :]))
            logits = model.decoder(trg, enc_src, src_mask, mask)
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            trg = torch.cat([trg, nxt], dim=1)
            if nxt.item() == EOS_IDX:
                break
    return trg
""",
    # The next token appended with torch.tensor(..., device=).
    "tensor_with_device": seed_with(
        FIX_METHOD_AND_DEVICE,
        FIX_ENCODER_MASK,
        FIX_DECODER_MASK,
        (
            "torch.ones(1, 1).fill_(next_token).long().to(device)",
            "torch.tensor([[next_token]], device=device)",
        ),
    ),
    # The padding dropped instead of masked: nothing left to attend to.
    "padding_dropped": seed_with(
        FIX_METHOD_AND_DEVICE,
        (
            "enc_src = model.encoder(src, None)",
            "src = src[:, src[0] != PAD_IDX]\n"
            "        enc_src = model.encoder(src, None)",
        ),
    ),
}


@pytest.mark.parametrize("name", RIGHT)
def test_right_fixes_written_differently_pass_every_check(name):
    assert verdicts(RIGHT[name]) == {check: None for check in CHECKS}


def test_the_start_token_of_the_seed_is_not_a_device_problem():
    # The seed's own torch.ones(1, 1).fill_(SOS_IDX).long().to(device): made on the CPU,
    # then moved before the model sees it. Only the mask is the seed's device bug.
    got = verdicts(FIXED)
    assert "torch.ones(1, 1).fill_(SOS_IDX).long().to(device)" in FIXED
    assert got["device"] is None


# ------------------------------------------------------------------- wrong fixes, named

WRONG = {
    # The mask made once, before the loop, for max_length tokens: wrong for every
    # shorter prefix.
    "mask_for_max_length": (
        seed_with(
            FIX_ENCODER_MASK,
            FIX_DECODER_MASK,
            ("trg_mask = model.decoder.create_trg_mask(trg)", "pass"),
            (
                "        for i in range(max_length - 1):",
                "        ones = torch.ones(max_length, max_length, device=device)\n"
                "        trg_mask = torch.tril(ones)\n"
                "        for i in range(max_length - 1):",
            ),
        ),
        "target",
        "target mask built for the wrong length",
        "your target mask had shape [10, 10]",
    ),
    # "max_length tokens" read as max_length new ones: one step too many (held-out
    # trial 2026-12-06, where the message named no mistake).
    "loop_one_step_too_many": (
        seed_with(
            FIX_METHOD_AND_DEVICE,
            FIX_ENCODER_MASK,
            FIX_DECODER_MASK,
            ("for i in range(max_length - 1):", "for i in range(max_length):"),
        ),
        "target",
        "the loop returns the wrong number of tokens",
        "tokens where 10 are expected, and the first 10 are the expected ones",
    ),
    # Off by one: sized as if the new token were already in trg.
    "mask_one_too_long": (
        seed_with(
            FIX_ENCODER_MASK,
            FIX_DECODER_MASK,
            (
                "trg_mask = model.decoder.create_trg_mask(trg)",
                "trg_mask = torch.tril(torch.ones(i + 2, i + 2, device=device))",
            ),
        ),
        "target",
        "target mask built for the wrong length",
        "At the step that decoded 1 token, your target mask had shape [2, 2]",
    ),
    # triu instead of tril: each position sees itself and the future.
    "mask_triu": (
        seed_with(
            FIX_ENCODER_MASK,
            FIX_DECODER_MASK,
            (
                "trg_mask = model.decoder.create_trg_mask(trg)",
                "trg_mask = torch.triu(torch.ones(trg.size(1), trg.size(1), device=device))",
            ),
        ),
        "target",
        "causal mask inverted",
        "[[1, 1], [0, 1]]",
    ),
    # nn.MultiheadAttention's convention (True = ignore) on a model that masks the
    # zeros.
    "mask_as_ignore_mask": (
        seed_with(
            FIX_ENCODER_MASK,
            FIX_DECODER_MASK,
            (
                "trg_mask = model.decoder.create_trg_mask(trg)",
                "trg_mask = create_trg_mask(trg).to(device) == 0",
            ),
        ),
        "target",
        "causal mask inverted",
        "[[0, 1], [0, 0]]",
    ),
    # The method call dropped together with the mask.
    "no_target_mask": (
        seed_with(
            FIX_ENCODER_MASK,
            FIX_DECODER_MASK,
            ("trg_mask = model.decoder.create_trg_mask(trg)", "trg_mask = None"),
        ),
        "target",
        "decoding without the causal target mask",
        "your target mask was None",
    ),
    # The source mask built from the target.
    "src_mask_from_trg": (
        seed_with(
            FIX_METHOD_AND_DEVICE,
            FIX_ENCODER_MASK,
            (
                "output = model.decoder(trg, enc_src, None, trg_mask)",
                "output = model.decoder(trg, enc_src, create_src_mask(trg), trg_mask)",
            ),
        ),
        "padding",
        "source mask not built from src",
        "for a source of 6 positions",
    ),
    # The source mask built from the encoder's output [1, S, D].
    "src_mask_from_enc_src": (
        seed_with(
            FIX_METHOD_AND_DEVICE,
            (
                "enc_src = model.encoder(src, None)",
                "enc_src = model.encoder(src, None)\n"
                "        src_mask = create_src_mask(enc_src)",
            ),
            FIX_DECODER_MASK,
        ),
        "padding",
        "source mask not built from src",
        "shape [1, 1, 1, 6, 32]",
    ),
    # The padding mask inverted (True where the token *is* padding).
    "src_mask_inverted": (
        seed_with(
            FIX_METHOD_AND_DEVICE,
            (
                "enc_src = model.encoder(src, None)",
                "src_mask = (src == PAD_IDX).unsqueeze(1).unsqueeze(2)\n"
                "        enc_src = model.encoder(src, src_mask)",
            ),
            FIX_DECODER_MASK,
        ),
        "padding",
        "source mask not built from src",
        "masked the real tokens and kept the padding",
    ),
    # Only the encoder told about the padding: the cross-attention still reads it.
    "src_mask_encoder_only": (
        seed_with(FIX_METHOD_AND_DEVICE, FIX_ENCODER_MASK),
        "padding",
        "padding in the source attended to",
        "model.decoder calls got src_mask=None",
    ),
    # The new token built on the CPU: torch.cat meets trg on the model's device.
    "token_without_device": (
        seed_with(
            FIX_METHOD_AND_DEVICE,
            FIX_ENCODER_MASK,
            FIX_DECODER_MASK,
            (
                "torch.ones(1, 1).fill_(next_token).long().to(device)",
                "torch.tensor([[next_token]])",
            ),
        ),
        "device",
        "tensor built without a device",
        "made without a device in generate_text: `trg = torch.cat([trg, "
        "torch.tensor([[next_token]])], dim=1)` met the model's tensors (in cat),",
    ),
    # The course's causal_mask, but without its device argument: made on the CPU.
    "course_mask_without_device": (
        seed_with(
            FIX_ENCODER_MASK,
            FIX_DECODER_MASK,
            (
                "trg_mask = model.decoder.create_trg_mask(trg)",
                "trg_mask = causal_mask(trg.size(1))",
            ),
        ).replace(
            "def generate_text",
            "from tformer_ref.masks import causal_mask\n\n\ndef generate_text",
        ),
        "device",
        "tensor built without a device",
        "made without a device in generate_text: `trg_mask = causal_mask(trg.size(1))`",
    ),
    # .cpu() "moves" the mask: to the CPU, whatever the model's device.
    "mask_moved_to_cpu": (
        seed_with(
            FIX_ENCODER_MASK,
            FIX_DECODER_MASK,
            (
                "trg_mask = model.decoder.create_trg_mask(trg)",
                "trg_mask = create_trg_mask(trg).cpu()",
            ),
        ),
        "device",
        "tensor built without a device",
        "put on the CPU by name (cpu)",
    ),
}


@pytest.mark.parametrize("name", WRONG)
def test_realistic_wrong_fixes_are_rejected_naming_the_mistake(name):
    answer, check, diagnosis, observed = WRONG[name]
    with pytest.raises(CheckFailure) as failure:
        CHECKS[check](learner(answer))
    assert diagnosis in str(failure.value)
    assert observed in str(failure.value)


def test_wrong_fixes_keep_the_other_bugs_fixed():
    # Each wrong fix above breaks one thing; a check of another bug is not fooled into
    # failing.
    got = verdicts(WRONG["src_mask_encoder_only"][0])
    assert got["target"] is None and got["device"] is None


def test_a_wrong_output_is_named_by_the_contract():
    answer = seed_with(
        FIX_METHOD_AND_DEVICE,
        FIX_ENCODER_MASK,
        FIX_DECODER_MASK,
        ("    return trg", "    return trg[0]"),
    )
    expected = r"expected a LongTensor \[1, T\].*got shape \["
    with pytest.raises(CheckFailure, match=expected):
        bughunt.check_target_mask(learner(answer))


# ---------------------------------------------------------------------- the hidden test


def test_the_hidden_test_rejects_the_reference_greedy_decode():
    answer = """
from tformer_ref.decoding import greedy_decode


def generate_text(model, src, max_length, device):
    core = model.encoder.core
    return greedy_decode(core, src, max_length - 1, SOS_IDX, EOS_IDX, PAD_IDX)
"""
    bughunt.check_target_mask(learner(answer))  # right tokens...
    with pytest.raises(CheckFailure, match="tformer_ref.greedy_decode"):
        bughunt.check_generate_text_by_hand(learner(answer))  # ...not the learner's


def test_the_hidden_test_accepts_the_fixed_loop(capsys):
    bughunt.check_generate_text_by_hand(learner(FIXED))
    assert "written by hand" in capsys.readouterr().out


# ---------------------------------------------------------- messages, stderr, the model


def test_checks_print_one_line_each_and_nothing_to_stderr(capsys):
    fn = learner(FIXED)
    for check in CHECKS.values():
        check(fn)
    out = capsys.readouterr()
    assert out.err == "" and out.out.count("✓") == 3


def test_failures_write_nothing_to_stderr(capsys):
    verdicts(SEED)
    assert capsys.readouterr().err == ""


def test_the_notebooks_model_has_the_seeds_interface_and_no_mask_method():
    model = bughunt.seed_style_model()
    src = torch.tensor([[5, 9, 4, 11, 0]], device=model.core.generator.weight.device)
    enc_src = model.encoder(src, None)
    trg = torch.ones(1, 3, dtype=torch.long, device=src.device)
    assert model.decoder(trg, enc_src, None, None).shape == (1, 3, bughunt.VOCAB)
    assert not hasattr(model.decoder, "create_trg_mask")


def test_the_model_masks_the_zeros_as_the_seeds_masked_fill_does():
    # A float 1/0 mask and the same bool mask decode the same; its inverse does not.
    model = bughunt.seed_style_model().eval()
    device = model.core.generator.weight.device
    src = torch.tensor([[5, 9, 4, 11]], device=device)
    trg = torch.tensor([[1, 11, 8, 11]], device=device)
    tril = torch.ones(4, 4, device=device).tril()
    with torch.no_grad():
        enc_src = model.encoder(src, None)
        a = model.decoder(trg, enc_src, None, tril)
        b = model.decoder(trg, enc_src, None, tril.bool())
        c = model.decoder(trg, enc_src, None, tril == 0)
    assert torch.equal(a, b) and not torch.allclose(a, c)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_seeds_mask_raises_and_the_check_names_it(monkeypatch):
    monkeypatch.setenv("TFORMER_DEVICE", "cuda")
    model = bughunt.seed_style_model()
    src = torch.tensor([[5, 9, 4, 11]], device="cuda")
    fn = learner(seed_with(FIX_METHOD))  # the free function, its mask still on the CPU
    with pytest.raises(RuntimeError, match="device"):
        fn(model, src, 5, torch.device("cuda"))
    with pytest.raises(CheckFailure, match="tensor built without a device"):
        bughunt.check_mask_device(fn)
    assert verdicts(FIXED) == {name: None for name in CHECKS}
    for name in RIGHT:
        assert verdicts(RIGHT[name]) == {check: None for check in CHECKS}, name


def test_the_padding_check_names_a_target_mask_that_is_not_causal():
    # Source masks right, target mask triu: the tokens differ for that reason, said so.
    answer = seed_with(
        FIX_ENCODER_MASK,
        FIX_DECODER_MASK,
        (
            "trg_mask = model.decoder.create_trg_mask(trg)",
            "trg_mask = torch.triu(torch.ones(trg.size(1), trg.size(1), device=device))",
        ),
    )
    with pytest.raises(CheckFailure, match="causal mask inverted"):
        bughunt.check_source_padding(learner(answer))
