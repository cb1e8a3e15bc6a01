# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Bug hunt — the seed's greedy decoding loop
#
# The seed ends its write-up with a function that generates text from a trained model.
# Below is that function, `generate_text`, **exactly as the seed prints it** (Chinese
# comments included; they are translated below). It has the right overall shape, which
# lesson [§6.7](../ch06_training/lesson.ipynb#id-6-7-greedy-and-beam-decoding) describes: eval mode, no gradients, the source encoded once, a start
# token, one argmax token appended per step, a stop at `EOS`. It also has three bugs.
# Find them and fix them **in place**, in the answer cell, keeping the name and
# signature `generate_text(model, src, max_length, device)`.
#
# Each bug has its own check cell and its own points, and each check judges only its own
# bug, so every bug you fix earns its points even while the others remain. When a check
# fails it says which bug it still sees, what it measured, and which lesson section
# explains it:
# [§6.7 'Greedy and beam decoding'](../ch06_training/lesson.ipynb#id-6-7-greedy-and-beam-decoding)
# for the loop, and [§3.1 'Padding masks'](../ch03_masks/lesson.ipynb#id-3-1-padding-masks) and
# [§3.2 'The causal mask'](../ch03_masks/lesson.ipynb#id-3-2-the-causal-mask) for the masks.
#
# **How to work.** Run the setup cell, read the seed's code, run the *try it* cell, then
# edit the answer cell and run the check cells below it. Do not edit the check cells:
# they are restored before grading, and some grading cases are hidden.
#
# **Grade yourself** at any time, from the course folder:
# `python -m tformer_grading book/ch06_bughunt/exercise.ipynb`

# %% [markdown]
# ## The model, the masks and the token ids
#
# The seed's loop calls `model.encoder(src, src_mask)`, which returns the encoded source
# `enc_src` `[N, S, D]`, and `model.decoder(trg, enc_src, src_mask, trg_mask)`, which returns
# logits `[N, T, V]`. The setup cell builds a small, untrained model with exactly that interface
# (a `tformer_ref` Transformer behind it), so that the seed's loop runs unchanged and the only
# bugs are the seed's own. Its masks follow the seed's convention, from the seed's
# `masked_fill(mask == 0, float("-1e20"))`: an entry equal to 0 (or `False`) is masked, any other
# entry may be attended to, `None` masks nothing, and a mask broadcasts to the attention scores
# `[N, heads, query_len, key_len]`.
#
# The setup cell also defines what the seed's loop uses besides the model:
#
# - `create_trg_mask`, the seed's own function, verbatim, from its section {seed}`004:4. 掩码（Mask）写错`
#   ({seedtr}`004:4. The mask written wrong`);
# - `create_src_mask`: the seed's `Transformer.forward` calls `create_src_mask(src)` but the seed
#   never defines it, so here is the padding mask of the other seed,
#   `(x != 0).unsqueeze(1).unsqueeze(2)`, with `PAD_IDX` for 0: `[N, 1, 1, S]`, `True` at real
#   tokens;
# - the token ids `SOS_IDX = 1`, `EOS_IDX = 2`, `PAD_IDX = 0`.
#
# `src` is a LongTensor `[1, S]` already on `device` (it may end with `PAD_IDX` padding, as a row
# of a padded batch does). `generate_text` returns `trg`, a LongTensor `[1, T]`: `SOS_IDX`, then
# the greedy tokens, at most `max_length` tokens in all, ending with `EOS_IDX` when the model
# produces it, as the seed's loop intends.

# %% nbgrader="locked:setup"
import torch

from tformer_grading.checks import bughunt_decoding
from tformer_grading.checks.bughunt_decoding import EOS_IDX, PAD_IDX, SOS_IDX
from tformer_ref.device import get_device, seed_everything

seed_everything(0)
device = get_device()
model = bughunt_decoding.seed_style_model(device)  # the seed's interface


# The seed's create_trg_mask, verbatim.
def create_trg_mask(trg):
    N, trg_len = trg.shape
    trg_mask = torch.tril(torch.ones((trg_len, trg_len))).expand(
        N, 1, trg_len, trg_len
    )

    return trg_mask


# The seed calls create_src_mask without defining it: the other seed's padding mask.
def create_src_mask(src):
    """src [N, S] -> [N, 1, 1, S], True where the token is not padding."""
    return (src != PAD_IDX).unsqueeze(1).unsqueeze(2)


# %% [markdown]
# ## The seed's loop
#
# Under the heading {seed}`004:生成文本` ({seedtr}`004:Generating text`), the seed writes
# {seed}`004:用训练好的模型生成文本：` ({seedtr}`004:Generate text with the trained model:`)
# and then the code in the answer cell below.
# Its comments, in order:
#
# | the seed's comment | in English |
# |---|---|
# | {seed}`004:# 编码源序列` | encode the source sequence |
# | {seed}`004:# 初始化目标序列为 <SOS> token` | initialise the target sequence to the `<SOS>` token |
# | {seed}`004:# 创建 target mask` | create the target mask |
# | {seed}`004:# 前向传播` | forward pass |
# | {seed}`004:# 取最后一个 token 的输出` | take the output at the last token |
# | {seed}`004:# 拼接到目标序列` | append it to the target sequence |
# | {seed}`004:# 如果生成了 <EOS> token，停止生成` | if the `<EOS>` token was generated, stop generating |
#
# and after the code: {seed}`004:生成文本时用贪婪解码，也可以用 beam search 提升质量。`
# ({seedtr}`004:Text is generated greedily; beam search can also improve quality.`)
#
# Where to look: what the loop calls, on which device each tensor it builds lives (the
# check runs on a CPU too, and follows every tensor your loop makes), and what the model
# is told about the source. `torch.ones(1, 1).fill_(SOS_IDX).long().to(device)` is *not*
# a bug: the start token is an integer tensor on the model's device.
#
# nbgrader adds two lines after the seed's `return trg` (`# YOUR CODE HERE` and
# `raise NotImplementedError()`): they come after the `return`, so they never run. Delete them or
# leave them.

# %% nbgrader="solution:generate_text"
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
    ### BEGIN SOLUTION


# The fixed loop, which replaces the seed's definition above.
def generate_text(model, src, max_length, device):
    model.eval()
    with torch.no_grad():
        # Bug 3: the source's padding is masked, in the encoder and in the
        # cross-attention.
        src_mask = create_src_mask(src)

        # 编码源序列
        enc_src = model.encoder(src, src_mask)

        # 初始化目标序列为 <SOS> token
        trg = torch.ones(1, 1).fill_(SOS_IDX).long().to(device)

        for i in range(max_length - 1):
            # 创建 target mask
            # Bug 1: create_trg_mask is a free function, not a method of the decoder.
            # Bug 2: it builds the mask on the CPU, so move it to the model's device.
            trg_mask = create_trg_mask(trg).to(device)

            # 前向传播
            output = model.decoder(trg, enc_src, src_mask, trg_mask)

            # 取最后一个 token 的输出
            next_token = output.argmax(2)[:, -1].item()

            # 拼接到目标序列
            trg = torch.cat([trg, torch.ones(1, 1).fill_(next_token).long().to(device)], dim=1)

            # 如果生成了 <EOS> token，停止生成
            if next_token == EOS_IDX:
                break

    return trg
    ### END SOLUTION


# %% [markdown]
# Try it on a source that ends with two `PAD_IDX` (the seed's loop stops with an error
# here: read it).

# %%
example = torch.tensor([[5, 9, 4, 11, PAD_IDX, PAD_IDX]], device=device)
try:
    print(generate_text(model, example, 10, device))
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}")

# %% [markdown]
# ## 1. The target mask (2 points)
#
# The check decodes four sources without padding, on this kind of model, and compares
# your tokens with the reference's greedy search (`tformer_ref.decoding.greedy_decode`,
# which uses the causal mask at every step). Lesson [§6.7](../ch06_training/lesson.ipynb#id-6-7-greedy-and-beam-decoding) and [§3.2](../ch03_masks/lesson.ipynb#id-3-2-the-causal-mask).

# %% nbgrader="test:test_target_mask:2"
bughunt_decoding.check_target_mask(generate_text)
### BEGIN HIDDEN TESTS
bughunt_decoding.check_generate_text_by_hand(generate_text)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Where the tensors it builds live (2 points)
#
# On a GPU the model's tensors are CUDA tensors, and a tensor built on the CPU that meets them
# raises an error. On a CPU nothing shows, so the check follows every tensor your loop makes (a
# `TorchFunctionMode` sees each PyTorch call): one made without a device (`torch.ones(3, 3)`) that
# meets the model's tensors without having been moved (`.to(device)`, `device=...`, or built from
# a tensor that is already there, such as `torch.ones_like(trg)`) fails it, and the failure names
# the line that made it. Lesson [§6.7](../ch06_training/lesson.ipynb#id-6-7-greedy-and-beam-decoding).

# %% nbgrader="test:test_mask_device:2"
bughunt_decoding.check_mask_device(generate_text)

# %% [markdown]
# ## 3. Padding in the source (3 points)
#
# A source that ends with padding must decode exactly as the reference decodes it with
# the padding masked (which is also how it decodes without the padding). The check
# decodes four such sources. Lesson [§3.1](../ch03_masks/lesson.ipynb#id-3-1-padding-masks).

# %% nbgrader="test:test_source_padding:3"
bughunt_decoding.check_source_padding(generate_text)

# %% [markdown]
# ## Limits of the seed's loop that are not bugs
#
# These are not graded; they are worth knowing before you reuse the loop.
#
# - **One sequence at a time.** `next_token = output.argmax(2)[:, -1].item()` turns the next
#   token into a Python number, which only works for a batch of one, and the loop stops when that
#   one sequence produces `EOS`. A batched loop keeps the next tokens as a tensor `[N]`, pads the
#   sequences that have finished and stops when all have (the reference's `greedy_decode`, [§6.7](../ch06_training/lesson.ipynb#id-6-7-greedy-and-beam-decoding)).
# - **`max_length` counts the start token.** The loop runs `max_length - 1` steps, so `trg` holds
#   at most `max_length` tokens, `SOS_IDX` included.
# - **The whole prefix is decoded again at every step**, so a sequence of `T` tokens costs `T`
#   decoder passes over ever longer prefixes. A key/value cache keeps what earlier steps computed.
# - **The model is left in eval mode.** Called in the middle of training (to print a sample), the
#   loop would leave dropout off for the rest of training; the reference's `greedy_decode` restores
#   the mode it found.
# - **`src` must already be on `device`**: the loop moves the tokens it builds there, not the
#   source.
#
# ## Done?
#
# Run the self-grading command above. Every check that passes prints a line starting
# with ✓.
