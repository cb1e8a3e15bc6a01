"""What chapter 8's three measured banks (next_token_probs, lm_step, generate_greedy)
share: how their expected diagnoses are written.

The expected diagnoses are written against the *name* of the pitfall a failure gives
(``this looks like the pitfall '<name>'``, see ``diagnosis.Diagnosis.fail``): ``_named``
builds a pattern that requires every group of words in that name, in any order, so a
check may word the mistake its own way but must name the right one. A few entries expect
instead the measured quantity the failure states.

After one measurement against the checks, two kinds of expectation were changed, and no
other: a pattern was widened where the check names the same mistake in words of its own
(say 'temperature has no effect' for probabilities divided by T, or 'not causal: the
future is visible' for a triu or inverted mask), and a mistake no check was written for
that the checks reject with a precise observation but no name became GENERIC. ``listed``
marks the canonical form of a mistake the checks name.

The first measurement (81 of 85 wrong answers rejected, 62 named, 15 generic, 4
misnamed) found classes of mistake the checks had no case or probe for: a running sum
that reaches p exactly, logits large enough to overflow exp, dropout at eval, float
token ids, a cache mismanaged by the loop rather than the step, positions wrong on an
empty cache. The checks gained those cases and probes (without reading the bank), and
five GENERIC entries that they now name were relabelled with that name: so for those
five classes the bank is no longer a measure of mistakes nobody listed.
"""


def _named(*groups: str) -> str:
    """A pattern for a failure naming a pitfall whose name holds each alternation of
    ``groups`` (case-insensitive, any order)."""
    inside = r"(?:(?!'\.\s).)*?"  # stays within the quoted name
    return r"(?i)pitfall '" + "".join(f"(?={inside}(?:{g}))" for g in groups)
