"""Chapter 6's learner answers that the tests of two test files share: each is
graded by its exercise's tests and by the chapter's stderr test (test_checks_ch06.py):
a noam_lambda in numpy (which warns on 0 ** -0.5), two training steps with the
scheduler or the clipping out of order, and a greedy decoder that builds a graph.
"""

import torch

from tformer_ref import training
from tformer_ref.masks import causal_mask


def noam_numpy_inf(step, d_model, warmup):
    # numpy: 0 ** -0.5 is inf (with a warning), not an exception.
    import numpy as np

    n = np.float64(step)
    return float(d_model**-0.5 * np.minimum(n**-0.5, n * warmup**-1.5))


def step_clips_after_update(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    opt.zero_grad()
    logits = model(src, tgt[:, :-1])
    loss = training.sequence_loss(logits, tgt[:, 1:], pad_id, eps)
    loss.backward()
    opt.step()
    # The weights have already moved by the unclipped gradient.
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    sched.step()
    return loss.item(), norm.item()


def step_scheduler_first(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    opt.zero_grad()
    tgt_in, labels = training.shift_targets(tgt)
    loss = training.sequence_loss(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    sched.step()  # before the optimizer: the first update already uses the second rate
    opt.step()
    return loss.item(), norm.item()


def greedy_with_autograd(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()  # but no torch.no_grad(): a graph is built at every step
    memory, src_mask = model.encode(src)
    out = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        logits = model.decode(out, memory, src_mask, causal_mask(out.size(1)))
        nxt = logits[:, -1].argmax(-1).masked_fill(finished, pad_id)
        out = torch.cat([out, nxt[:, None]], dim=1)
        finished |= nxt == eos_id
        if finished.all():
            break
    return out
