"""What chapter 3's three measured banks (causal_mask, padding_mask,
masked_attention) share: the names their exercises' test cells take from the
reference."""

from tformer_ref.attention import scaled_dot_product_attention
from tformer_ref.masks import causal_mask as reference_causal_mask
from tformer_ref.masks import padding_mask as reference_padding_mask

# The mask probes' cell takes all three: the reference stands in for the others.
OTHERS = {
    "masked_attention": scaled_dot_product_attention,
    "causal_mask": reference_causal_mask,
    "padding_mask": reference_padding_mask,
}
