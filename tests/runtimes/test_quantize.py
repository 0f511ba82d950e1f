"""Per-token activation quantization of the int8 graph (structqa.runtimes.quantize), on a
one-product graph against a reference computed by hand."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from structqa.runtimes.quantize import quantize_int8

K, M = 64, 48


def _product_graph(path, weight: np.ndarray) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["tokens", K])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["tokens", M])
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="/encoder/MatMul")
    graph = helper.make_graph([node], "g", [x], [y], [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def _run(path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[
        0
    ]


@pytest.fixture
def graphs(tmp_path):
    rng = np.random.default_rng(0)
    weight = rng.normal(size=(K, M)).astype(np.float32)
    fp32 = tmp_path / "fp32.onnx"
    _product_graph(fp32, weight)
    for kind in ("per-token", "per-tensor"):
        quantize_int8(fp32, tmp_path / f"{kind}.onnx", activations=kind)
    return tmp_path, weight


def test_each_token_is_quantized_with_its_own_scale(graphs) -> None:
    tmp, weight = graphs
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, K)).astype(np.float32)
    x[2] *= 50  # one outlier token
    got = _run(tmp / "per-token.onnx", x)
    # the reference: the int8 weights the graph holds, and each row's scale max|x| / 127
    init = {
        t.name: numpy_helper.to_array(t)
        for t in onnx.load(str(tmp / "per-token.onnx")).graph.initializer
    }
    wq = next(v for k, v in init.items() if v.dtype == np.int8 and v.shape == (K, M))
    w_scale = next(v for k, v in init.items() if k.endswith("_scale") and v.shape == (M,))
    s = np.abs(x).max(axis=1, keepdims=True) / 127
    xq = np.clip(np.round(x / s), -128, 127)
    reference = (xq @ wq.astype(np.float64)) * s * w_scale
    np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-4)
    # near the fp32 product on every row, the outlier's neighbours included
    exact = x @ weight
    per_token_err = np.abs(got - exact).max(axis=1)
    per_tensor_err = np.abs(_run(tmp / "per-tensor.onnx", x) - exact).max(axis=1)
    others = [i for i in range(len(x)) if i != 2]
    assert (per_token_err[others] < per_tensor_err[others] / 5).all()


def test_a_tokens_result_does_not_depend_on_the_other_tokens(graphs) -> None:
    tmp, _ = graphs
    rng = np.random.default_rng(2)
    x = rng.normal(size=(5, K)).astype(np.float32)
    louder = x.copy()
    louder[4] *= 30
    alone = _run(tmp / "per-token.onnx", x[:1])
    for batch in (x, louder):
        np.testing.assert_array_equal(_run(tmp / "per-token.onnx", batch)[0], alone[0])
    # onnxruntime's own per-tensor graph: the first token's result moves with the fifth
    moved = _run(tmp / "per-tensor.onnx", louder)[0] - _run(tmp / "per-tensor.onnx", x)[0]
    assert np.abs(moved).max() > 1e-2


def test_an_unknown_activation_mode_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="per-token, per-tensor"):
        quantize_int8(tmp_path / "a.onnx", tmp_path / "b.onnx", activations="per-channel")
