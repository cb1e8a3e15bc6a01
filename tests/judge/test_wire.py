"""The wire between the judge and the kernel: data in, data out, nothing run, every
bound kept (tformer_grading/judge/wire.py)."""

import base64
import json

import pytest
import torch

from tformer_grading.judge.wire import (
    BOUNDS,
    Bounds,
    Raised,
    Ref,
    WireError,
    decode,
    encode,
    tensors_in,
)


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        3,
        -2.5,
        "text",
        [1, [2, (3, None)]],
        {"a": (1.0, "b")},
        torch.float16,
        torch.device("cpu"),
        Raised("RuntimeError", "shapes do not match"),
        Ref(7, "callable", "attention"),
    ],
)
def test_plain_values_cross_unchanged(value):
    assert decode(encode(value)) == value


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.bool,
        torch.uint8,
        torch.complex64,
    ],
)
def test_tensors_cross_bit_for_bit(dtype):
    x = (torch.randn(3, 4, 5) * 100).to(dtype)
    back = decode(encode(x))
    assert back.dtype == dtype and back.shape == x.shape
    assert torch.equal(back.view(-1).view(torch.uint8), x.reshape(-1).view(torch.uint8))


def test_nan_inf_and_empty_tensors_cross():
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0])
    back = decode(encode({"x": x, "e": torch.empty(0, 3), "f": float("nan")}))
    assert torch.equal(back["x"].isnan(), x.isnan()) and back["x"][1:].tolist() == [
        float("inf"),
        -float("inf"),
        0.0,
    ]
    assert back["e"].shape == (0, 3)
    assert back["f"] != back["f"]


def test_a_non_contiguous_view_crosses_as_its_values():
    x = torch.arange(12.0).reshape(3, 4).T
    assert torch.equal(decode(encode(x)), x)


class Lying(torch.Tensor):
    """A subclass whose comparisons and truth lie."""

    def __eq__(self, other):
        return True

    def __bool__(self):
        return True

    def allclose(self, *args, **kwargs):
        return True


def test_a_tensor_subclass_arrives_as_a_plain_tensor():
    lying = torch.zeros(3).as_subclass(Lying)
    back = decode(encode(lying))
    assert type(back) is torch.Tensor
    assert not torch.allclose(back, torch.ones(3))


def test_objects_that_are_not_data_are_refused_or_referred():
    with pytest.raises(WireError, match="a object cannot be sent as data"):
        encode(object())
    kept = []

    def refer(obj):
        kept.append(obj)
        return Ref(len(kept), "object", type(obj).__name__)

    assert decode(encode([print], refer=refer)) == [
        Ref(1, "object", "builtin_function_or_method")
    ]


def _tensor_doc(**fields):
    doc = {
        "$": "tensor",
        "dtype": "float32",
        "shape": [2],
        "device": "cpu",
        "requires_grad": False,
        "data": base64.b64encode(bytes(8)).decode(),
    }
    doc.update(fields)
    return json.dumps(doc)


@pytest.mark.parametrize(
    "text,message",
    [
        ("{not json", "not a JSON document"),
        ('{"$": "pickle", "data": "gASV"}', "unknown kind 'pickle'"),
        ("[NaN]", "NaN is not JSON"),
        (_tensor_doc(dtype="object"), "unknown dtype 'object'"),
        (_tensor_doc(shape=[3]), "needs 12 bytes, and 8 came"),
        (_tensor_doc(shape=[-1]), "sizes ≥ 0"),
        (_tensor_doc(shape="2"), "needs 'shape' as a list"),
        (_tensor_doc(data="***"), "not base64"),
        (_tensor_doc(device="meta"), "device of type 'meta'"),
        ('{"$": "float", "value": "1e999"}', "not nan or ±inf"),
        ('{"$": "ref", "id": 1, "kind": "module", "type": "x"}', "reference kind"),
        ('{"$": "raised", "type": 3, "message": "m"}', "needs 'type' as a str"),
        ("[" * 100 + "]" * 100, "deeper than"),
        (b"{}", "expected a JSON text, got a bytes"),
    ],
)
def test_malformed_messages_are_clear_errors(text, message):
    with pytest.raises(WireError, match=message):
        decode(text)


def test_bounds_are_kept_before_anything_is_built():
    small = Bounds(chars=1000, items=20, tensors=2, elements=10)
    with pytest.raises(WireError, match="over the bound of 1,000"):
        decode(json.dumps("x" * 2000), bounds=small)
    with pytest.raises(WireError, match="more than 20 values"):
        decode(json.dumps(list(range(30))), bounds=small)
    with pytest.raises(WireError, match="more than 2 tensors"):
        decode(encode([torch.zeros(1)] * 3), bounds=small)
    with pytest.raises(WireError, match="more than 10 elements"):
        decode(encode(torch.zeros(11)), bounds=small)
    # A huge shape with no data is refused by its element count, not allocated.
    huge = _tensor_doc(shape=[1 << 20, 1 << 20], data="")
    with pytest.raises(WireError, match="elements in all"):
        decode(huge)
    assert BOUNDS.elements < (1 << 40)


def test_tensors_are_listed_in_the_order_they_are_written():
    a, b, c = torch.zeros(1), torch.ones(1), torch.full((1,), 2.0)
    value = (a, {"x": [b, 3], "y": c})
    assert [t.item() for t in tensors_in(value)] == [0.0, 1.0, 2.0]
    assert [t.item() for t in tensors_in(decode(encode(value)))] == [0.0, 1.0, 2.0]
