"""Every registered head on the tiny checkpoint: shapes, finiteness (also bf16), gradients,
decoding against a brute-force argmax, the registry, and a short training run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from head_helpers import HEAD_NAMES, tiny_model

from structqa.config import load_config
from structqa.decoding import DecodeConfig, SpanCollector
from structqa.encoders.bert import EncoderConfig
from structqa.heads import HEADS, IndependentHead, QueryHead, build_head
from structqa.heads.joint import FullJointScorer, JointScorer
from structqa.models.build import model_from_checkpoint
from structqa.training import loop

L = 30  # the decoder's and the heads' default max answer length
JOINT = [h for h in HEAD_NAMES if "joint" in h]


def test_registry_names_and_errors() -> None:
    assert set(HEADS) == set(HEAD_NAMES)
    assert isinstance(build_head("independent", 16), IndependentHead)
    cfg = EncoderConfig(hidden_size=16, num_heads=2, intermediate_size=32)
    head = build_head("dyrex+joint", cfg, query_mask="causal", dyrex_layers=2, joint_mode="full")
    assert isinstance(head, QueryHead) and isinstance(head.scorer, FullJointScorer)
    assert len(head.queries.layers) == 2 and head.queries.query_mask == "causal"
    with pytest.raises(ValueError, match="did you mean 'dyrex\\+joint'"):
        build_head("dyrex+jiont", cfg)
    with pytest.raises(ValueError, match="did you mean 'query_mask'"):
        build_head("dyref", cfg, querymask="causal")
    with pytest.raises(ValueError, match="contradicts"):
        build_head("dyrex", cfg, num_heads=4)


def forward(model, batch, bf16: bool = False):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        return model(batch)


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", HEAD_NAMES)
def test_shapes_finiteness_and_gradients(tiny_checkpoint, mini_data, name: str, bf16: bool):
    model = tiny_model(tiny_checkpoint, name).train()
    batch = mini_data.batch()
    b, n = batch.input_ids.shape
    out = forward(model, batch, bf16)
    assert out.start_logits.shape == out.end_logits.shape == (b, n)
    assert out.start_logits.dtype == out.end_logits.dtype == torch.float32
    assert bool(torch.isfinite(out.start_logits).all() & torch.isfinite(out.end_logits).all())
    if "joint" in name:
        assert out.span_scores is not None and out.null_scores is not None
        assert out.span_scores.shape == (b, n, L) and out.null_scores.shape == (b,)
        assert out.span_scores.dtype == torch.float32
        assert bool(torch.isfinite(out.span_scores).all() & torch.isfinite(out.null_scores).all())
        assert out.loss_skipped is not None and not bool(out.loss_skipped.any())
    else:
        assert out.span_scores is None and out.null_scores is None
    assert out.loss is not None and out.loss.shape == () and bool(torch.isfinite(out.loss))
    out.loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is None or bool(torch.isfinite(p.grad).all()), pname
    for pname, p in model.head.named_parameters():
        assert p.grad is not None, pname  # (DDP needs every parameter in the graph)
        # a key bias adds the same amount to every key of a query: softmax cancels it exactly
        if not pname.endswith("attn.key.bias"):
            assert bool(p.grad.abs().sum() > 0), pname


def phi_matrix(model, batch) -> torch.Tensor:
    """(B, N, N) float64 scores of every (start, end) pair computed from the head's own
    queries, token states and W, with no band or masking tricks."""
    hidden = model.encoder(
        batch.input_ids,
        batch.attention_mask,
        batch.token_type_ids,
        **model.head.encoder_inputs(batch),
    ).last_hidden_state
    states = model.head.queries(hidden, batch)
    q, h = states.queries.double(), states.tokens.double()
    start = torch.einsum("bnd,bd->bn", h, q[:, 0])
    end = torch.einsum("bnd,bd->bn", h, q[:, 1])
    phi = start[:, :, None] + end[:, None, :]
    if isinstance(model.head.scorer, JointScorer):
        phi = phi + h @ model.head.scorer.W.double() @ h.transpose(1, 2)
    return phi


@pytest.mark.parametrize("name", HEAD_NAMES)
def test_decoding_finds_the_brute_force_best_span(tiny_checkpoint, mini_data, name: str):
    model = tiny_model(tiny_checkpoint, name)
    if isinstance(model.head.scorer, JointScorer):
        with torch.no_grad():  # a non-zero W, so the bilinear term matters
            model.head.scorer.W.normal_(0.0, 0.1)
    batch = mini_data.batch()
    collector = SpanCollector(DecodeConfig(max_answer_length=L))
    with torch.no_grad():
        collector.add(model(batch), batch.feature_index, batch.answer_mask)
        phi = phi_matrix(model, batch).tolist()
    predictions = collector.predictions(mini_data.examples, mini_data.features)

    best: dict[int, tuple[float, int, int]] = {}  # example -> (score, start char, end char)
    for row, feature in enumerate(mini_data.features):
        passage = [t for t in range(1, len(feature)) if feature.offsets[t, 0] >= 0]
        for i in passage:
            for j in passage:
                if i <= j < i + L:
                    score = phi[row][i][j]
                    if score > best.get(feature.example_index, (-float("inf"),))[0]:
                        chars = (int(feature.offsets[i, 0]), int(feature.offsets[j, 1]))
                        best[feature.example_index] = (score, *chars)
    assert len(predictions) == len(best) == len(mini_data.examples)
    for e, ex in enumerate(mini_data.examples):
        pred = predictions[ex.id]
        assert (pred.start_char, pred.end_char) == best[e][1:], ex.id
        assert pred.score == pytest.approx(best[e][0], rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("name", ["dyrex+joint", "dyref+joint"])
def test_joint_scores_use_the_dynamic_queries(tiny_checkpoint, mini_data, name: str) -> None:
    model = tiny_model(tiny_checkpoint, name)
    batch = mini_data.batch()
    with torch.no_grad():
        before = model(batch)
        model.head.queries.q0[0] += 0.5
        after = model(batch)
    valid = before.span_scores > -1e3
    assert not torch.allclose(after.span_scores[valid], before.span_scores[valid])
    assert not torch.allclose(after.null_scores, before.null_scores)


def tiny_train_config(tmp: Path, ckpt: Path, data: Path, head: str, *extra: str):
    return load_config(
        overrides=[
            f"model.encoder={ckpt}",
            f"model.head={head}",
            f"data.dir={data}",
            "data.train=fixtures/squad-v1.1-mini.json",
            "data.eval=fixtures/squad-v1.1-mini.json",
            "data.train_size=all",
            "data.max_seq_len=128",
            "data.doc_stride=32",
            f"train.output_dir={tmp}",
            "train.batch_size=4",
            "train.max_steps=30",
            "train.lr=3e-3",
            "train.warmup_ratio=0.1",
            "train.dropout=0.0",
            "train.weight_decay=0.0",
            "train.eval_every_epoch=false",
            "train.bf16=off",
            "train.log_every_steps=1",
            *extra,
        ]
    )


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("independent", ()),
        ("joint", ()),
        ("dyrex", ("model.query_mask=causal", "model.dyrex_layers=2")),
        ("dyref", ()),
        ("dyrex+joint", ("model.joint_mode=full",)),
        ("dyref+joint", ("model.query_mask=independent",)),
    ],
)
def test_training_lowers_the_loss(tmp_path, tiny_checkpoint, shared_data, name, options):
    cfg = tiny_train_config(tmp_path, tiny_checkpoint, shared_data, name, *options)
    loop.run(cfg, progress=False)
    log = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in log if "loss" in x]
    assert len(losses) == 30 and all(map(torch.isfinite, torch.tensor(losses)))
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.7 * first, losses
    # the saved config rebuilds the same head (options included) and its weights load strictly
    model, _, saved = model_from_checkpoint(tmp_path / "last")
    assert saved.model.head == name
    assert type(model.head.queries) is type(tiny_model(tiny_checkpoint, name).head.queries)


@pytest.mark.parametrize("name", HEAD_NAMES)
def test_bf16_weight_inference_matches_fp32(tiny_checkpoint, mini_data, name: str) -> None:
    """run_inference under bf16 runs a bf16 copy (the model itself stays float32) and finds
    the fp32 model's answers up to bf16 rounding."""
    from structqa.inference import bf16_weights, run_inference

    model = tiny_model(tiny_checkpoint, name).eval()
    net = bf16_weights(model)
    assert net is not model and bf16_weights(net) is net
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(p.dtype == torch.bfloat16 for p in net.parameters())
    batch = mini_data.batch()
    with torch.inference_mode():
        ref, low = model(batch), net(batch)
    assert low.start_logits.dtype == torch.float32
    for a, b in ((ref.start_logits, low.start_logits), (ref.end_logits, low.end_logits)):
        ok = torch.isfinite(a)
        assert bool((ok == torch.isfinite(b)).all())
        scale = a[ok].abs().max().clamp(min=1.0)
        assert float((a[ok] - b[ok]).abs().max()) < 0.05 * float(scale)
    decode = DecodeConfig()
    feats = mini_data.features
    fp32 = run_inference(model, feats, decode, 4, bf16=False).predictions(mini_data.examples, feats)
    bf16 = run_inference(model, feats, decode, 4, bf16=True).predictions(mini_data.examples, feats)
    assert fp32.keys() == bf16.keys()
    assert all(p.dtype == torch.float32 for p in model.parameters())
