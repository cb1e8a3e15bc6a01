"""Chapter 2's learner answers that the tests of two test files share: the right
attention of the lesson and the one without its 1/√d_k, graded by the attention tests
(test_checks_attention.py) and by the chapter's stderr tests (test_checks_ch02.py).
"""

import math

import torch


def attention_matmul(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def attention_no_scaling(q, k, v):  # forgot the 1/√d_k
    weights = torch.softmax(torch.matmul(q, k.mT), dim=-1)
    return torch.matmul(weights, v), weights
