"""Per-token activation quantization of the int8 graph (structqa.runtimes.quantize), on a
one-product graph against a reference computed by hand."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from structqa.runtime import INT8_WEIGHTS_ENV, int8_weight_type
from structqa.runtimes.onnx_model import session
from structqa.runtimes.quantize import (
    as_7bit_weights,
    as_uint8_weights,
    compact_embeddings,
    quantize_int8,
)

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
    """The graph on this CPU, with the int8 weight type structqa loads for it."""
    return session(path, int8=True).run(None, {"x": x})[0]


@pytest.fixture
def graphs(tmp_path):
    rng = np.random.default_rng(0)
    weight = rng.normal(size=(K, M)).astype(np.float32)
    fp32 = tmp_path / "fp32.onnx"
    _product_graph(fp32, weight)
    for kind in ("per-token", "per-tensor"):
        quantize_int8(fp32, tmp_path / f"{kind}.onnx", activations=kind)
    return tmp_path, weight


def _weights(path) -> tuple[np.ndarray, np.ndarray]:
    """The int8 weights a per-token graph holds, and their per-column scales."""
    init = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    wq = next(v for k, v in init.items() if v.dtype == np.int8 and v.shape == (K, M))
    w_scale = next(v for k, v in init.items() if k.endswith("_scale") and v.shape == (M,))
    return wq, w_scale


def _loaded_weights(path) -> tuple[np.ndarray, np.ndarray]:
    """The weights and scales the graph computes with on this CPU: as exported, or halved to
    7 bits (scales doubled) where the CPU lacks VNNI (uint8 weights are the same numbers)."""
    if int8_weight_type() != "s7":
        return _weights(path)
    model = onnx.load(str(path))
    as_7bit_weights(model)
    held = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    w7 = next(v for k, v in held.items() if k.endswith("_quantized_7bit"))
    return w7, next(v for k, v in held.items() if k.endswith("_scale_7bit"))


def _outlier_tokens() -> np.ndarray:
    x = np.random.default_rng(1).normal(size=(6, K)).astype(np.float32)
    x[2] *= 50  # one outlier token
    return x


def _per_token_reference(x: np.ndarray, wq: np.ndarray, w_scale: np.ndarray) -> np.ndarray:
    """Each row's scale max|x| / 127, exact integer products with the int8 weights."""
    s = np.abs(x).max(axis=1, keepdims=True) / 127
    xq = np.clip(np.round(x / s), -128, 127)
    return (xq @ wq.astype(np.float64)) * s * w_scale


def _avx2_uint8_int8_sums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """uint8 ``a`` (T, K) times int8 ``b`` (K, M) as an x86 CPU without VNNI adds them in
    onnxruntime's uint8 x int8 kernel: ``vpmaddubsw`` adds each pair of neighbouring products
    along K in 16 bits, saturating, then the pairs are summed in 32 bits."""
    products = a.astype(np.int32)[:, :, None] * b.astype(np.int32)[None, :, :]  # (T, K, M)
    pairs = products[:, 0::2] + products[:, 1::2]
    return np.clip(pairs, -32768, 32767).sum(axis=1)


def _exact_and_avx2_sums(
    x: np.ndarray, wq: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each token's scale, the exact integer products of its int8 values with ``wq``, and
    what AVX2's uint8 x int8 kernel sums them to (uint8 activations at zero point 128:
    sum((xq + 128) w) - 128 sum(w))."""
    s = np.abs(x).max(axis=1, keepdims=True) / 127
    xq = np.clip(np.round(x / s), -128, 127)
    exact = xq.astype(np.int64) @ wq.astype(np.int64)
    avx2 = _avx2_uint8_int8_sums((xq + 128).astype(np.uint8), wq) - 128 * wq.astype(np.int64).sum(
        axis=0
    )
    return s, exact, avx2


def test_each_token_is_quantized_with_its_own_scale(graphs) -> None:
    tmp, weight = graphs
    x = _outlier_tokens()
    got = _run(tmp / "per-token.onnx", x)
    reference = _per_token_reference(x, *_loaded_weights(tmp / "per-token.onnx"))
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


def test_uint8_weights_compute_exactly_what_avx2_would_saturate(graphs, monkeypatch) -> None:
    """On x86 CPUs without VNNI the int8 weights load as uint8 (zero point 128): onnxruntime's
    uint8 x uint8 kernel sums in 32 bits, so the graph computes the exact integer products
    that its uint8 x int8 kernel there would saturate (a reference of that arithmetic)."""
    tmp, _ = graphs
    x = _outlier_tokens()
    wq, w_scale = _weights(tmp / "per-token.onnx")
    s, exact, saturating = _exact_and_avx2_sums(x, wq)
    assert (saturating != exact).sum() > 0  # the fault is real for these tokens
    model = onnx.load(str(tmp / "per-token.onnx"))
    assert as_uint8_weights(model) == 1
    types = {t.name: t.data_type for t in model.graph.initializer}
    product = next(n for n in model.graph.node if n.op_type == "MatMulInteger")
    assert types[product.input[1]] == TensorProto.UINT8 == types[product.input[3]]
    assert not [t for t in model.graph.initializer if t.data_type == TensorProto.INT8]
    monkeypatch.setenv(INT8_WEIGHTS_ENV, "u8")
    assert int8_weight_type() == "u8"
    got = _run(tmp / "per-token.onnx", x)
    np.testing.assert_allclose(got, exact * s * w_scale, rtol=1e-5, atol=1e-4)


def test_the_weight_type_follows_the_cpu_that_loads_the_graph(monkeypatch) -> None:
    import structqa.runtime as runtime

    monkeypatch.delenv(INT8_WEIGHTS_ENV, raising=False)
    monkeypatch.setattr(runtime.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    monkeypatch.delenv(runtime.MAX_ISA_ENV, raising=False)
    assert int8_weight_type() == "s7"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset({"avx2", "avx512_vnni"}))
    assert int8_weight_type() == "s8"
    monkeypatch.setenv(runtime.MAX_ISA_ENV, "AVX2")  # oneDNN's cap stands for an AVX2 CPU
    assert int8_weight_type() == "s7"
    monkeypatch.setattr(runtime.platform, "machine", lambda: "aarch64")
    assert int8_weight_type() == "s8"
    monkeypatch.setenv(INT8_WEIGHTS_ENV, "int4")
    with pytest.raises(ValueError, match="s8, s7, u8"):
        int8_weight_type()


def test_7bit_weights_keep_avx2s_fast_kernel_exact(graphs, monkeypatch) -> None:
    """The default on x86 CPUs without VNNI: the weights halved to 7 bits (scale doubled), so
    that onnxruntime's uint8 x int8 kernel there, whose pair sums saturate at 16 bits, adds
    them exactly (a reference of that arithmetic), and the graph computes the exact integer
    products of the 7-bit weights, near the fp32 product."""
    tmp, weight = graphs
    x = _outlier_tokens()
    wq, w_scale = _weights(tmp / "per-token.onnx")
    model = onnx.load(str(tmp / "per-token.onnx"))
    assert as_7bit_weights(model) == 1
    held = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    w7 = next(v for k, v in held.items() if k.endswith("_quantized_7bit"))
    s7 = next(v for k, v in held.items() if k.endswith("_scale_7bit"))
    assert w7.min() >= -64 and w7.max() <= 63
    np.testing.assert_allclose(s7, 2 * w_scale)
    s, exact, avx2 = _exact_and_avx2_sums(x, w7)
    np.testing.assert_array_equal(avx2, exact)  # no pair saturates
    monkeypatch.setenv(INT8_WEIGHTS_ENV, "s7")
    got = _run(tmp / "per-token.onnx", x)
    np.testing.assert_allclose(got, exact * s * s7, rtol=1e-5, atol=1e-4)
    # one bit less: still near fp32 on every token
    fp32 = x @ weight
    scale = np.abs(fp32).max(axis=1)
    assert (np.abs(got - fp32).max(axis=1) < 0.05 * scale).all()


def test_the_reference_of_avx2s_kernel_is_what_this_cpu_computes(graphs, monkeypatch) -> None:
    """The premise of the 7-bit default, checked on the CPU that runs the tests, not on a
    reference: with the 8-bit weights as exported, onnxruntime's uint8 x int8 product
    saturates exactly as the reference of AVX2's pair sums says on an x86 CPU without VNNI
    (its kernels follow CPUID, which no ISA cap changes), and is exact on one with VNNI."""
    import platform

    from structqa.runtime import VNNI_FLAGS, cpu_flags

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("onnxruntime's x86 integer kernels only")
    tmp, _ = graphs
    x = _outlier_tokens()
    wq, w_scale = _weights(tmp / "per-token.onnx")
    s, exact, pair_sums = _exact_and_avx2_sums(x, wq)
    assert (pair_sums != exact).sum() > 0  # these tokens do saturate AVX2's pair sums
    monkeypatch.setenv(INT8_WEIGHTS_ENV, "s8")
    got = _run(tmp / "per-token.onnx", x)
    vnni = bool(cpu_flags() & VNNI_FLAGS)  # the raw flags: no ISA cap reaches onnxruntime
    expected = exact if vnni else pair_sums
    np.testing.assert_allclose(got, expected * s * w_scale, rtol=1e-5, atol=1e-4)


def _lookup_graph(tables: dict[str, np.ndarray], tied: str | None = None):
    """``ids`` looked up in each table, one output each; the ``tied`` table is also read by a
    second node (a product with its transpose, as a tied output layer would)."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "tokens"])
    nodes, outputs = [], []
    for name, table in tables.items():
        nodes.append(helper.make_node("Gather", [name, "ids"], [name + "_out"], name=name))
        shape = ["batch", "tokens", table.shape[1]]
        outputs.append(helper.make_tensor_value_info(name + "_out", TensorProto.FLOAT, shape))
    if tied is not None:
        nodes += [
            helper.make_node("Transpose", [tied], ["tied_t"]),
            helper.make_node("MatMul", [tied + "_out", "tied_t"], ["tied_scores"]),
        ]
        shape = ["batch", "tokens", tables[tied].shape[0]]
        outputs.append(helper.make_tensor_value_info("tied_scores", TensorProto.FLOAT, shape))
    inits = [numpy_helper.from_array(t, n) for n, t in tables.items()]
    graph = helper.make_graph(nodes, "g", [ids], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_the_vocabulary_table_in_int8_has_a_scale_per_row(tmp_path) -> None:
    rng = np.random.default_rng(3)
    words = rng.normal(size=(3000, 16)).astype(np.float32)
    words[7] *= 1000  # one loud row must not coarsen the others
    words[9] = 0.0
    positions = rng.normal(size=(1000, 16)).astype(np.float32)
    model = _lookup_graph({"words": words, "positions": positions})
    assert compact_embeddings(model, "int8") == ["words"]  # positions: too few rows to matter
    held = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert "words" not in held and held["words_int8"].dtype == np.int8
    assert held["positions"].dtype == np.float32
    onnx.checker.check_model(model)
    onnx.save(model, str(tmp_path / "int8.onnx"))
    ids = np.array([[0, 7, 9, 999], [5, 5, 1, 2]], dtype=np.int64)
    got, got_positions = session(tmp_path / "int8.onnx").run(None, {"ids": ids})
    exact = words[ids]
    # each value within half a step of its own row's scale; the zero row stays zero
    step = np.abs(words).max(axis=1)[ids][..., None] / 127
    assert (np.abs(got - exact) <= step / 2 + 1e-6).all()
    assert (got[0, 2] == 0).all()
    assert np.abs(got[0, 0] - exact[0, 0]).max() < 0.05  # not coarsened by the loud row
    np.testing.assert_array_equal(got_positions, positions[ids])


def test_a_table_another_node_reads_stays_fp32() -> None:
    words = np.random.default_rng(4).normal(size=(2048, 8)).astype(np.float32)
    model = _lookup_graph({"words": words}, tied="words")
    assert compact_embeddings(model) == compact_embeddings(model, "int8") == []
    assert [t.name for t in model.graph.initializer] == ["words"]


def test_the_vocabulary_table_in_fp16_is_the_table_rounded_to_fp16(tmp_path) -> None:
    rng = np.random.default_rng(5)
    words = rng.normal(size=(2000, 16)).astype(np.float32)
    model = _lookup_graph({"words": words})
    assert compact_embeddings(model) == ["words"]
    held = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert list(held) == ["words_fp16"] and held["words_fp16"].dtype == np.float16
    onnx.save(model, str(tmp_path / "fp16.onnx"))
    ids = np.array([[0, 1999, 7]], dtype=np.int64)
    (got,) = session(tmp_path / "fp16.onnx").run(None, {"ids": ids})
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, words[ids].astype(np.float16).astype(np.float32))


def test_an_export_holds_its_vocabulary_in_fp16(tmp_path) -> None:
    rng = np.random.default_rng(6)
    fp32 = tmp_path / "fp32.onnx"
    onnx.save(_lookup_graph({"words": rng.normal(size=(1500, 8)).astype(np.float32)}), str(fp32))
    quantize_int8(fp32, tmp_path / "int8.onnx")
    kinds = {t.name: t.data_type for t in onnx.load(str(tmp_path / "int8.onnx")).graph.initializer}
    assert kinds == {"words_fp16": TensorProto.FLOAT16}
    with pytest.raises(ValueError, match="fp32, fp16, int8"):
        quantize_int8(fp32, tmp_path / "b.onnx", embeddings="bf16")
