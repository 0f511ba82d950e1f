"""The int8 graph of an export: onnxruntime's dynamic quantization of the encoder's matrix
products, with the activations quantized per token instead of per call.

onnxruntime's ``quantize_dynamic`` quantizes each activation tensor with one scale for the
whole tensor (``DynamicQuantizeLinear``), taken over everything in one call of the graph: every
window of the batch and its padding. A window's logits then move with its neighbours, and a
micro-batching server could answer the same question differently under other traffic. Its
graph is rewritten so that each token's activation row gets its own scale (symmetric, the
row's largest magnitude over 127, zero point 128 in uint8): a window's logits no longer depend
on what shares its call, and one outlier token no longer coarsens every other token's
quantization. Measured in docs/results/runtimes/README.md.

Why by hand: onnxruntime's quantizer has no per-token activation mode, and its ``MatMulInteger``
takes only a scalar zero point for its first input, so the per-token scale is applied by one
``Mul`` after each integer product (where the graph multiplied by the activation scale, that
scale becomes 1: onnxruntime's fused integer-product kernel takes per-tensor or per-column
scales only, and gave wrong results when handed per-row ones).

The word-embedding table is a lookup (``Gather``), not a product, so ``quantize_dynamic`` leaves
it fp32: 47 MB of MiniLM's 90. :func:`compact_embeddings` stores it in fp16 (the default: a
relative error of 0.02 % a row; the general reader's int8 file 39 MB instead of 63) or in int8
with a scale per row (0.7 %; 28 MB). On every held-out SQuAD question neither moved F1 beyond
the int8 graph's own noise (fp16 −0.21 [−0.61, +0.17], int8 −0.29 [−0.72, +0.11] against the
fp32 table: docs/results/runtimes/README.md); fp16 is the default as the change that rounds
least. Why by hand: onnxruntime's own ``Gather`` quantization gives the whole table one int8
scale and has no fp16 storage.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np

#: how an int8 graph quantizes its activations: ``per-token`` (written by this version) or
#: ``per-tensor`` (onnxruntime's default; exports made before per-token, whose structqa_export.json
#: names no ``activations``)
PER_TOKEN, PER_TENSOR = ACTIVATIONS = ("per-token", "per-tensor")

_CONSTANTS = {
    "per_token_zero_point": np.array(128, dtype=np.uint8),
    "per_token_one": np.array(1.0, dtype=np.float32),
    "per_token_inv127": np.array(1.0 / 127, dtype=np.float32),
    "per_token_eps": np.array(1e-12, dtype=np.float32),
}
_U8_ZERO = "uint8_weight_zero_point"
#: the fewest rows of a lookup table that :func:`compact_embeddings` stores compactly
EMBEDDING_MIN_ROWS = 1024
#: how an int8 graph may hold its word-embedding table (``structqa_export.json`` names it;
#: exports made before it name none: fp32)
EMBEDDINGS = ("fp32", "fp16", "int8")


def quantize_int8(
    fp32: Path, out: Path, activations: str = PER_TOKEN, embeddings: str = "fp16"
) -> None:
    """onnxruntime's dynamic int8 quantization of the encoder's weight matrix products: int8
    weights with one scale per output channel, activations quantized per token
    (:func:`per_token_activations`; ``per-tensor``: as onnxruntime leaves them). Per-tensor
    weight scales cost the quickstart DyREx checkpoint 1.8 F1 on 400 held-out questions,
    per-channel 0.3 (docs/results/runtimes/README.md). The head's products (the learned
    queries, DyREx's decoder, the joint bilinear form) stay fp32: they rank spans and cost
    little. ``embeddings``: how the word-embedding table is held (:data:`EMBEDDINGS`,
    :func:`compact_embeddings`; fp32: as exports made before it)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if activations not in ACTIVATIONS:
        raise ValueError(f"activations {activations!r}: one of {', '.join(ACTIVATIONS)}")
    if embeddings not in EMBEDDINGS:
        raise ValueError(f"embeddings {embeddings!r}: one of {', '.join(EMBEDDINGS)}")
    head_nodes = [n.name for n in onnx.load(str(fp32)).graph.node if "/head/" in n.name]
    with _quiet_quantizer():
        quantize_dynamic(
            str(fp32),
            str(out),
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul", "Gemm"],
            nodes_to_exclude=head_nodes,
        )
    model = onnx.load(str(out))
    if activations == PER_TOKEN:
        per_token_activations(model)
    if embeddings != "fp32":
        compact_embeddings(model, embeddings)
    onnx.checker.check_model(model)
    onnx.save(model, str(out))


@contextlib.contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """Drop what onnxruntime's quantizer logs through the root logger (a line per tensor it
    leaves alone, and advice to pre-process meant for vision models): an export made on the
    way to answering a question should not fill the user's screen with it."""

    def keep(record: logging.LogRecord) -> bool:
        return "onnxruntime" not in record.pathname or record.levelno >= logging.ERROR

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def per_token_activations(model) -> int:
    """Rewrite ``model`` (an ``onnx.ModelProto`` from ``quantize_dynamic``) in place so that
    every ``DynamicQuantizeLinear`` quantizes each row of its input (one token's activations,
    the last axis) with a scale of its own; returns how many integer products now rescale per
    row. Each quantized tensor must feed only the first input of ``MatMulInteger`` nodes
    followed by ``Cast`` and ``Mul``, which is what ``quantize_dynamic`` writes."""
    from onnx import helper, numpy_helper

    graph = model.graph
    consumers = _consumers(graph)
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in _CONSTANTS.items())
    rescaled: dict[str, str] = {}  # the Mul applying an activation scale -> the row scales
    nodes = []
    for k, node in enumerate(graph.node):
        if node.op_type != "DynamicQuantizeLinear":
            nodes.append(node)
            continue
        x = node.input[0]
        quantized, scale, zero_point = node.output
        p = f"per_token_{k}"
        rows = p + "_scale"
        for product, i in consumers.get(quantized, []):
            rescaled[_scaling_mul(product, i, consumers).name] = rows
        nodes += [
            helper.make_node("ReduceMax", [x], [p + "_max"], axes=[-1], keepdims=1),
            helper.make_node("ReduceMin", [x], [p + "_min"], axes=[-1], keepdims=1),
            helper.make_node("Neg", [p + "_min"], [p + "_neg_min"]),
            helper.make_node("Max", [p + "_max", p + "_neg_min", "per_token_eps"], [p + "_abs"]),
            helper.make_node("Mul", [p + "_abs", "per_token_inv127"], [rows]),
            helper.make_node("Div", [x, rows], [p + "_scaled"]),
            helper.make_node(
                "QuantizeLinear",
                [p + "_scaled", "per_token_one", "per_token_zero_point"],
                [quantized],
            ),
            helper.make_node("Identity", ["per_token_zero_point"], [zero_point]),
            helper.make_node("Identity", ["per_token_one"], [scale]),
        ]
    out = []
    for node in nodes:
        out.append(node)
        if node.name in rescaled:
            y = node.output[0]
            node.output[0] = y + "_per_tensor"
            out.append(
                helper.make_node(
                    "Mul", [node.output[0], rescaled[node.name]], [y], name=node.name + "_rows"
                )
            )
    del graph.node[:]
    graph.node.extend(out)
    return len(rescaled)


def compact_embeddings(
    model, precision: str = "fp16", min_rows: int = EMBEDDING_MIN_ROWS
) -> list[str]:
    """Rewrite ``model`` (``onnx.ModelProto``) in place so that every lookup table of at least
    ``min_rows`` fp32 rows that only a ``Gather`` on its first axis reads is held in
    ``precision``: fp16 (the lookup becomes ``Gather`` of the fp16 rows, then ``Cast``) or
    int8, each row with its own scale (symmetric: the row's largest magnitude over 127; the
    lookup becomes ``Gather`` of the int8 rows, ``Cast``, times the ``Gather`` of their
    scales). Returns the tables rewritten (the vocabulary's; the position and segment tables
    are small and stay fp32)."""
    if precision not in ("fp16", "int8"):
        raise ValueError(f"precision {precision!r}: fp16 or int8")
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    consumers = _consumers(graph)
    done: list[str] = []
    nodes = []
    for node in graph.node:
        table = node.input[0] if node.op_type == "Gather" and node.input else None
        init = inits.get(table) if table else None
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if (
            init is None
            or init.data_type != TensorProto.FLOAT
            or len(init.dims) != 2
            or init.dims[0] < min_rows
            or axis != 0
            or len(consumers[table]) != 1
        ):
            nodes.append(node)
            continue
        values = numpy_helper.to_array(init)
        ids, y = node.input[1], node.output[0]
        if precision == "fp16":
            graph.initializer.append(
                numpy_helper.from_array(values.astype(np.float16), table + "_fp16")
            )
            nodes += [
                helper.make_node(
                    "Gather", [table + "_fp16", ids], [y + "_fp16"], name=node.name + "_fp16"
                ),
                helper.make_node("Cast", [y + "_fp16"], [y], to=TensorProto.FLOAT),
            ]
            done.append(table)
            continue
        scale = np.abs(values).max(axis=1, keepdims=True) / 127
        scale[scale == 0] = 1.0  # an all-zero row stays zero
        rows = np.clip(np.round(values / scale), -127, 127).astype(np.int8)
        q, s = table + "_int8", table + "_row_scale"
        graph.initializer.extend(
            [numpy_helper.from_array(rows, q), numpy_helper.from_array(scale.astype(np.float32), s)]
        )
        nodes += [
            helper.make_node("Gather", [q, ids], [y + "_int8"], name=node.name + "_int8"),
            helper.make_node("Cast", [y + "_int8"], [y + "_unscaled"], to=TensorProto.FLOAT),
            helper.make_node("Gather", [s, ids], [y + "_scale"], name=node.name + "_scale"),
            helper.make_node("Mul", [y + "_unscaled", y + "_scale"], [y], name=node.name + "_rows"),
        ]
        done.append(table)
    del graph.node[:]
    graph.node.extend(nodes)
    _drop_unused_initializers(graph)
    return done


def _scaling_mul(product, i: int, consumers: dict[str, list]):
    """The ``Mul`` that scales the integer ``product``'s result (MatMulInteger -> Cast -> Mul)."""
    if product.op_type != "MatMulInteger" or i != 0:
        raise ValueError(
            f"{product.name}: a quantized activation feeds {product.op_type} input {i}"
        )
    (cast, _), *more = consumers[product.output[0]]
    if more or cast.op_type != "Cast":
        raise ValueError(f"{product.name}: its result is not cast once, as quantize_dynamic writes")
    (mul, _), *more = consumers[cast.output[0]]
    if more or mul.op_type != "Mul":
        raise ValueError(
            f"{product.name}: its result is not scaled once, as quantize_dynamic writes"
        )
    return mul


def as_uint8_weights(model) -> int:
    """Rewrite ``model`` (an int8 graph, ``onnx.ModelProto``) in place so that every integer
    product takes uint8 weights: each int8 weight ``w`` becomes ``w + 128`` with its zero point
    raised by 128, the same numbers; returns how many products changed. For x86 CPUs without
    VNNI, where onnxruntime's uint8 x int8 kernel saturates and its uint8 x uint8 one does not
    (:func:`structqa.runtime.int8_weight_type`)."""
    from onnx import TensorProto, numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    int8 = TensorProto.INT8
    made: dict[str, str] = {}  # int8 initializer -> its uint8 copy

    def shifted(name: str) -> str:
        if name not in made:
            values = numpy_helper.to_array(inits[name]).astype(np.int16) + 128
            made[name] = name + "_u8"
            graph.initializer.append(numpy_helper.from_array(values.astype(np.uint8), made[name]))
        return made[name]

    changed = 0
    for node, weight in _int8_weight_products(graph, inits):
        zero = node.input[3] if len(node.input) > 3 and node.input[3] else None
        if zero is not None and (zero not in inits or inits[zero].data_type != int8):
            raise ValueError(f"{node.name}: its int8 weight's zero point is not a constant")
        node.input[1] = shifted(weight)
        if zero is None:  # zero point 0 in int8 is 128 in uint8
            if _U8_ZERO not in inits:
                zero_point = _CONSTANTS["per_token_zero_point"]
                graph.initializer.append(numpy_helper.from_array(zero_point, _U8_ZERO))
                inits[_U8_ZERO] = graph.initializer[-1]
            while len(node.input) < 3:
                node.input.append("")
            node.input.append(_U8_ZERO)
        else:
            node.input[3] = shifted(zero)
        changed += 1
    _drop_unused_initializers(graph)
    return changed


def as_7bit_weights(model) -> int:
    """Rewrite ``model`` (an int8 graph, ``onnx.ModelProto``) in place so that every integer
    product's int8 weights use 7 bits: ``round(w / 2)`` in [-64, 63], with the weight scale
    doubled (onnxruntime's ``reduce_range``, applied when the graph is loaded); returns how
    many products changed. For x86 CPUs without VNNI: there onnxruntime's fast uint8 x int8
    kernel adds pairs of products in 16 bits, and 255 x 64 x 2 = 32,640 fits where
    255 x 127 x 2 does not, so nothing saturates and the kernel keeps its speed (its uint8 x
    uint8 one ran at 0.66x here). The cost is one bit of weight resolution."""
    from onnx import numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    users = _consumers(graph)
    changed = 0
    for node, weight in _int8_weight_products(graph, inits):
        if not weight.endswith("_quantized"):
            raise ValueError(f"{node.name}: weight {weight} is not named as quantize_dynamic names")
        scale = weight.removesuffix("_quantized") + "_scale"
        zero = node.input[3] if len(node.input) > 3 else ""
        if scale not in inits or (zero and numpy_helper.to_array(inits[zero]).any()):
            raise ValueError(f"{node.name}: its weights are not symmetric with a constant scale")
        w = numpy_helper.to_array(inits[weight]).astype(np.int16)
        w7 = np.clip(np.round(w / 2), -64, 63).astype(np.int8)
        graph.initializer.append(numpy_helper.from_array(w7, weight + "_7bit"))
        node.input[1] = weight + "_7bit"
        doubled = numpy_helper.to_array(inits[scale]).astype(np.float32) * 2
        graph.initializer.append(numpy_helper.from_array(doubled, scale + "_7bit"))
        for user, i in users.get(scale, []):
            user.input[i] = scale + "_7bit"
        changed += 1
    _drop_unused_initializers(graph)
    return changed


def _consumers(graph) -> dict[str, list]:
    """Each tensor name -> the (node, input position) pairs that read it."""
    out: dict[str, list] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            out.setdefault(name, []).append((node, i))
    return out


def _int8_weight_products(graph, inits: dict) -> list:
    """The (node, weight name) of every integer product whose weights are an int8 constant."""
    from onnx import TensorProto

    return [
        (node, node.input[1])
        for node in graph.node
        if node.op_type == "MatMulInteger"
        and len(node.input) > 1
        and node.input[1] in inits
        and inits[node.input[1]].data_type == TensorProto.INT8
    ]


def _drop_unused_initializers(graph) -> None:
    """Remove the constants no node reads any more (the weights a rewrite replaced)."""
    used = {name for node in graph.node for name in node.input}
    keep = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
