"""Chapter 4's measured bank for feed_forward (the format: tests/bank/bank.py)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders

GRADERS = graders("ch04_blocks", {"feed_forward": "FeedForward"})


# ------------------------------------------------------------------ feed_forward, right


@right("feed_forward")
class FFModules(nn.Module):  # the lesson's layout
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


@right("feed_forward")
class FFSequential(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(d_ff, d_model),
        )

    def forward(self, x):
        return self.net(x)


@right("feed_forward")
class FFOutputRegisteredFirst(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_out = nn.Linear(d_ff, d_model)
        self.w_in = nn.Linear(d_model, d_ff)

    def forward(self, x):
        return self.w_out(self.w_in(x).clamp(min=0))


@right("feed_forward")
class FFFunctional(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.p = dropout

    def forward(self, x):
        h = F.relu(F.linear(x, self.fc1.weight, self.fc1.bias))
        h = F.dropout(h, self.p, self.training)
        return F.linear(h, self.fc2.weight, self.fc2.bias)


@right("feed_forward")
class FFMatmul(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.up, self.down = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = x @ self.up.weight.T + self.up.bias
        h = torch.maximum(h, torch.zeros_like(h))
        return h @ self.down.weight.T + self.down.bias


# Right until 2026-12-06; the exercise's formula has b1 and b2, and the held-out trial
# counted a FeedForward without them as wrong: FFN(0) is then 0 whatever the weights.
@wrong("feed_forward", r"'feed-forward without its biases'", listed=False)
class FFNoBias(nn.Module):  # biases off, as in LLaMA-style layers
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.a = nn.Linear(d_model, d_ff, bias=False)
        self.b = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.b(F.relu(self.a(x)))


@right("feed_forward")
class FFEinsum(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.layers = nn.ModuleList(
            [nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)]
        )

    def forward(self, x):
        first, second = self.layers
        h = torch.einsum("...d,fd->...f", x, first.weight) + first.bias
        h = h * (h > 0)
        return torch.einsum("...f,df->...d", h, second.weight) + second.bias


@right("feed_forward")
class FFInPlaceRelu(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = self.l1(x)
        h.relu_()
        return self.l2(h)


# ------------------------------------------------------------------ feed_forward, wrong


@wrong("feed_forward", r"'no activation between the two Linear layers'", listed=True)
class FFForgotRelu(nn.Module):  # the activation forgotten
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(self.l1(x))


@wrong("feed_forward", r"'ReLU after the output layer'", listed=True)
class FFReluEverywhere(nn.Module):  # "every layer gets an activation"
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return F.relu(self.l2(F.relu(self.l1(x))))


@wrong("feed_forward", r"go through GELU where", listed=False)
class FFGelu(nn.Module):  # GELU, as in BERT/GPT, where the exercise asks ReLU
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(F.gelu(self.l1(x)))


@wrong("feed_forward", r"GELU \(tanh approximation\)", listed=False)
class FFGeluTanh(nn.Module):  # GPT-2's tanh GELU
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


@wrong("feed_forward", r"through SiLU", listed=False)
class FFSilu(nn.Module):  # SiLU from a LLaMA tutorial
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(F.silu(self.l1(x)))


@wrong("feed_forward", r"LeakyReLU with slope 0\.1\b", listed=False)
class FFLeaky(nn.Module):  # "LeakyReLU avoids dead units"
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.act = nn.LeakyReLU(0.1)

    def forward(self, x):
        return self.l2(self.act(self.l1(x)))


@wrong("feed_forward", r"through sigmoid", listed=False)
class FFSigmoid(nn.Module):  # the textbook MLP's sigmoid
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(torch.sigmoid(self.l1(x)))


@wrong("feed_forward", r"through tanh", listed=False)
class FFTanh(nn.Module):  # tanh, as in an RNN cell
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x)))


@wrong("feed_forward", r"first Linear reads ReLU of x", listed=False)
class FFReluFirst(nn.Module):  # activation put before the first layer
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(self.l1(F.relu(x)))


@wrong("feed_forward", r"hidden layer has 48 features", listed=False)
class FFFourTimes(nn.Module):  # the paper's 4·d_model instead of the argument d_ff
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1 = nn.Linear(d_model, 4 * d_model)
        self.l2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


@wrong("feed_forward", r"hidden layer has 8 features", listed=False)
class FFSquare(nn.Module):  # d_ff ignored: d_model wide inside
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


@wrong("feed_forward", r"hidden layer has 2048 features", listed=False)
class FFPaperWidth(nn.Module):  # the paper's 2048 hard-coded
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, 2048), nn.Linear(2048, d_model)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


@wrong("feed_forward", r"'dropout still on in eval mode'.*hidden", listed=False)
class FFDropoutAlwaysOn(nn.Module):  # F.dropout's training=True default
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(F.dropout(F.relu(self.l1(x)), 0.1))


@wrong("feed_forward", r"returns the second Linear's output \+ x", listed=False)
class FFWithResidual(nn.Module):  # the residual added inside the sublayer too
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return x + self.l2(F.relu(self.l1(x)))


@wrong("feed_forward", r"returns 0\.204·the second Linear", listed=False)
class FFScaledOutput(nn.Module):  # "keep the variance": output divided by sqrt(d_ff)
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.scale = d_ff**-0.5

    def forward(self, x):
        return self.l2(F.relu(self.l1(x))) * self.scale


@wrong(
    "feed_forward",
    r"raised .* x \[S=6, D=8\].*`b, s, d = x\.shape` unpacks 3 sizes from a shape "
    r"with 2 axes",
    listed=False,
)
class FFAssumes3D(nn.Module):  # flattens assuming x is [B, S, D]
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        b, s, d = x.shape
        h = F.relu(self.l1(x.reshape(b * s, d)))
        return self.l2(h).reshape(b, s, d)


@wrong("feed_forward", r"returned shape \[10, 8\]", listed=False)
class FFForgetsToReshape(nn.Module):  # flattens the tokens and never restores the shape
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        flat = x.reshape(-1, x.size(-1))
        return self.l2(F.relu(self.l1(flat)))


@wrong("feed_forward", r"softmax over the hidden features", listed=False)
class FFSoftmax(nn.Module):  # attention habits: a softmax over the hidden units
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(torch.softmax(self.l1(x), dim=-1))


@wrong("feed_forward", r"through ReLU6", listed=False)
class FFRelu6(nn.Module):  # MobileNet's ReLU6
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(F.relu6(self.l1(x)))


@wrong("feed_forward", r"through squared ReLU", listed=False)
class FFSquaredRelu(nn.Module):  # Primer's squared ReLU
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)).pow(2))


@wrong("feed_forward", r"through ELU", listed=False)
class FFElu(nn.Module):  # ELU "because it is smooth"
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(nn.functional.elu(self.l1(x)))


@wrong("feed_forward", r"through the absolute value", listed=False)
class FFAbs(nn.Module):  # abs mistaken for a rectifier
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(self.l1(x).abs())


@wrong("feed_forward", r"go through no activation", listed=False)
class FFReluMovedToEnd(nn.Module):  # the ReLU moved after the second layer
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return torch.relu(self.l2(self.l1(x)))


@wrong("feed_forward", r"through softplus", listed=False)
class FFSoftplus(nn.Module):  # a "smooth ReLU"
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(F.softplus(self.l1(x)))


@wrong("feed_forward", r"first Linear reads 2\.449·x", listed=False)
class FFScalesInput(nn.Module):  # the embedding's sqrt(d_model) applied here too
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.d_model = d_model

    def forward(self, x):
        return self.l2(F.relu(self.l1(x * math.sqrt(self.d_model))))


@wrong("feed_forward", r"Mish", listed=False)
class FFMish(nn.Module):  # Mish from a YOLO codebase
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(nn.Mish()(self.l1(x)))


@wrong("feed_forward", r"modified its input x in place", listed=False)
class FFReluInPlaceOnInput(nn.Module):  # relu_ on x, "saves memory"
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x.relu_())))


@wrong("feed_forward", r"hidden value -\d\.\d+ became -1\b", listed=False)
class FFHardtanh(nn.Module):  # hardtanh mistaken for a clipped ReLU
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(F.hardtanh(self.l1(x)))


@wrong("feed_forward", r"a map that is not ReLU \(hidden value", listed=False)
class FFNormalisedHidden(nn.Module):  # a LayerNorm on the hidden layer, "for stability"
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = F.relu(self.l1(x))
        return self.l2(F.layer_norm(h, h.shape[-1:]))


@wrong("feed_forward", r"returns the second Linear's output \+ its bias", listed=False)
class FFBiasTwice(nn.Module):  # adds b2 by hand, not knowing nn.Linear has it
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x))) + self.l2.bias


# ------------------------------------------- held-out trial: dropout rates and eps


@wrong(
    "feed_forward",
    r"'feed-forward dropout in the wrong place or at the wrong rate'.*"
    r"2\d% of your FeedForward's output \(the second Linear's\) were zeroed",
    listed=False,
)
class FFDropoutOnOutput(nn.Module):  # "dropout after every layer": the last one too
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w1, self.w2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.w2(F.relu(self.w1(x))))


@wrong("feed_forward", r"of the first Linear's input \(x\) were zeroed", listed=False)
class FFDropoutOnInput(nn.Module):  # input dropout, as in some MLP recipes
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.p = dropout
        self.inner = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )

    def forward(self, x):
        return self.inner(F.dropout(x, self.p, self.training))


@wrong(
    "feed_forward", r"lost 10% at dropout=0\.2 and 10% at dropout=0\.5", listed=False
)
class FFHardCodedDropout(nn.Module):  # the paper's 0.1 typed in, the argument ignored
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w1, self.w2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.w2(self.drop(F.relu(self.w1(x))))


@wrong(
    "feed_forward",
    r"lost [78]\d% at dropout=0\.2 and [45]\d% at dropout=0\.5",
    listed=False,
)
class FFKeepProbability(nn.Module):  # dropout read as the keep probability (TF1 habit)
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.fc_in = nn.Linear(d_model, d_ff)
        self.fc_out = nn.Linear(d_ff, d_model)
        self.keep_prob = dropout

    def forward(self, x):
        h = torch.relu(self.fc_in(x))
        return self.fc_out(F.dropout(h, 1 - self.keep_prob, self.training))


@right("feed_forward")
class FFThreshold(nn.Module):  # F.threshold as the ReLU, layers in a ModuleDict
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.layers = nn.ModuleDict(
            {"up": nn.Linear(d_model, d_ff), "down": nn.Linear(d_ff, d_model)}
        )
        self.p = dropout

    def forward(self, x):
        h = F.threshold(self.layers["up"](x), 0.0, 0.0)
        return self.layers["down"](F.dropout(h, self.p, training=self.training))
