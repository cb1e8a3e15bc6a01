"""Chapter 4's right feed-forward, shared by two exercises' tests: the
feed-forward tests (test_checks_feed_forward.py) grade it and derive wrong ones from it;
the encoder-block tests (test_checks_encoder_block.py) build their blocks on it.
"""

import torch.nn.functional as F
from torch import nn


class FF(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2, self.drop = (
            nn.Linear(d_model, d_ff),
            nn.Linear(d_ff, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        return self.l2(self.drop(F.relu(self.l1(x))))
