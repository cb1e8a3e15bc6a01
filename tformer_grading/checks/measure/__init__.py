"""The checks' measuring toolkit: one concern per module, each written once.

A check of any exercise measures the learner's numbers with these; none of them knows
an exercise. Every module has doctested examples in which a planted mistake is read
back (``tests/checks/measure/``).

``closeness``
    whether two measured things are the same: numbers as :func:`math.isclose` with a
    tolerance each caller names, tensors of one shape, dtype and device within the
    checks' default tolerances.
``sizes``
    coded dimensions: a case's named sizes (``B=2, H=3, Sq=5``) and what a number is in
    them (``Sq``, ``H·Dh``, or none); a count of elements read as sizes times a
    constant that is none of them (480 = ``N·embed_size·5``, 262144 = ``512²``).
``torch_errors``
    PyTorch's size errors in a failure, read in the case's sizes ("5 (Sq) against 7
    (Sk)"); :func:`..diagnosis.fail` adds the reading to every failure.
``plain_errors``
    the errors read without sizes: an axis that does not exist, a shape unpacked into
    too many names, a view of a transposed tensor.
``softmax``
    a softmax read back from its weights: the axes they sum to 1 over, the factor on
    the scores (row by row), an output solved back for the weights it applied.
``formulas``
    the formula of the case's sizes that gives measured numbers on every case
    (``√Dh``, ``2·Dh``), and how a measured number is written.
``recorders``
    the calls a learner's step makes on the optimizer and scheduler a check hands it,
    recorded on the instance (one answer to PyTorch's step-wrapping quirk).
``fit``
    least-squares fits: a measured tensor read back as a weighted sum of named ones
    (``x + 0.5·attn``), and how such a sum is written.
``trace``
    stage tracing: the calls a forward makes (module hooks, recorded ``layer_norm`` and
    ``linear`` calls), in order, with snapshots of what went in and came out.
``probes``
    behaviour probes: a table of (probe, diagnosis) and its runner; token mixing,
    batch independence, determinism, causality, padding invariance.
``tape``
    the tape of a training step: a taped optimizer, GradScaler, ``zero_grad``,
    ``loss_fn`` (autocast state) and backward hooks write what the step did, in order.
``losses``
    a cross-entropy read back from its gradient: its normaliser, label smoothing and
    labels, and what the normaliser divides by.
``clipping``
    gradient clipping read back: what ``clip_grad_norm_`` leaves, which norm a clip
    measured, a clip per tensor or by value.
``decode_loops``
    a decoding loop read back from the model it drove: each step's prefix, mask, mode
    and memory, and the token appended after it.
``roles``
    which parameter plays which role, read off its gradient: the input whose span
    holds each weight row (query, key, value, or none alone), a bias paired with the
    rows whose gradient it shares.
``influence``
    which input positions change which outputs, read by changing one token at a time
    (a mask's rows read back), and positions written as "0..6" or "[0, 6]".
``mask_readings``
    attention masks read back: the keep pattern [B, H, Sq, Sk] a mask of any shape
    means, named against the causal triangle (triu, inverted, no diagonal, all
    visible) or a padding mask (inverted, causal added), its rows written out; and a
    mask misread, from where the weights are not zero (True taken as "ignore",
    transposed, batch and heads swapped, one sequence's mask for all).
``devices``
    where tensors live: the line of the learner's code that made a tensor without the
    model's device (or moved it off), and the op where it met the model's tensors (a
    mask built on the CPU, read on a CPU-only machine too).
``directions``
    how many directions an output moves when one input changes (a batch of random
    changes, their singular values): a narrow point read back, such as the heads'
    values summed into one head's width.
``positions``
    where a tensor's numbers went: the right numbers in other positions, the last two
    axes swapped, another (batch entry, head)'s block, the axes permuted, zeros where
    a prediction has none.
``fills``
    the fill value of a masked softmax read back: a probe of score levels down to
    -1e38 (a finite fill, -inf, or the levels it lies between), and the scores the
    masked keys' weights imply (one constant, or the true scores shifted).
``failing_call``
    the PyTorch call a crash came from, read by running the learner's function again
    where that changes nothing: its operands' shapes, and how each was made (``.T``
    of [B, H, Sk, Dh], ``[:B]`` of a table, a ``float()`` some calls before).
"""
