"""Which checks the judge runs, and which it leaves to the kernel.

``BEHAVIOUR``: checks whose verdict is measured on the judge's own inputs against
the reference it computes itself. The judge runs them in its process, on the
learner's objects reached through the kernel (:mod:`.remote`); a cell's points need
them to pass there.

``OBSERVATION``: checks that watch the learner's code from inside the kernel (was it
written by hand, did it call the reference). Only the kernel can watch, so only the
kernel's run of them counts, and it can withhold a cell's points, never grant them.
Each maps to the behaviour check the judge runs in its place on the same learner
object (a cell of its own then still scores only for right behaviour), or to None
where the cell already calls that check.

A test cell that calls a check in neither is graded in the kernel alone, with
receipts (:mod:`tformer_grading.guard.receipts`), until its exercise moves here.
Each name is ``<checks module>.<check>``, as a test cell writes it.
"""

BEHAVIOUR = frozenset(
    {
        "bughunt_attention.check_bug_einsum",
        "bughunt_attention.check_bug_fill_value",
        "bughunt_attention.check_bug_scale",
        "bughunt_attention.check_bug_shared_linear",
        "ch01.check_split_heads",
        "ch01.check_merge_heads",
        "ch01.check_multi_head_attention",
        "ch01.check_multi_head_attention_behaviour",
        "ch02.check_attention",
        "ch02.check_attention_entropy",
        "ch03.check_causal_mask",
        "ch03.check_padding_mask",
        "ch03.check_masked_attention",
        "ch03.check_masked_attention_half_precision",
        "ch03.check_mask_probes",
        "ch04.check_block_behaviour",
        "ch04.check_dropout_placement",
        "ch04.check_encoder_block",
        "ch04.check_feed_forward",
        "ch05.check_decoder_behaviour",
        "ch05.check_decoder_block",
        "ch05.check_embed",
        "ch05.check_sinusoidal_encoding",
        "ch06.check_greedy_decode",
        "ch06.check_shift_targets",
        "ch06.check_train_step",
        "ch06.check_sequence_loss",
        "ch06.check_noam_lambda",
        "ch08.check_next_token_probs",
    }
)

OBSERVATION = {
    "ch01.check_by_hand": None,
    "ch01.check_multi_head_attention_by_hand": (
        "ch01.check_multi_head_attention_behaviour"
    ),
    "ch02.check_attention_by_hand": "ch02.check_attention",
    "ch03.check_masked_attention_by_hand": "ch03.check_masked_attention",
    "ch04.check_block_by_hand": "ch04.check_block_behaviour",
    "ch05.check_by_hand": None,
    "ch05.check_decoder_by_hand": "ch05.check_decoder_behaviour",
    "ch06.check_by_hand": None,
    "ch06.check_greedy_by_hand": "ch06.check_greedy_decode",
    "ch06.check_train_step_by_hand": "ch06.check_train_step",
    "ch08.check_next_token_probs_by_hand": None,
}
