"""`structqa explain`: query attention maps (DyReF, DyREx), distributions (static queries),
and their PNG / HTML / JSON pictures, on tiny checkpoints trained for two steps."""

from __future__ import annotations

import html
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import mini_train_args

from structqa.analysis import RendererMissing, dyrex_trace, explain, render_html, render_png
from structqa.analysis.attention_maps import span_marginals
from structqa.cli import main
from structqa.data import read_examples
from structqa.features.batching import collate
from structqa.features.squad import FeatureConfig, featurize
from structqa.models.build import model_from_checkpoint
from structqa.prediction.predictor import Predictor

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest

MINI = "fixtures/squad-v1.1-mini.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


HAS_MATPLOTLIB, HAS_PILLOW = _importable("matplotlib"), _importable("PIL")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_checkpoint: Path, shared_data: Path):
    """head name -> the ``best`` checkpoint of the tiny encoder trained 2 steps with it."""
    runs: dict[str, Path] = {}

    def get(head: str) -> Path:
        if head not in runs:
            out = tmp_path_factory.mktemp(f"explain-{head}") / "run"
            before = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                code = main(
                    [
                        *mini_train_args("train", shared_data, tiny_checkpoint, out, MINI, 2),
                        "--no-progress",
                        f"--model.head={head}",
                    ]
                )
            finally:
                torch.set_num_threads(before)
            assert code == 0
            runs[head] = out / "best"
        return runs[head]

    return get


@pytest.fixture(scope="module")
def qa(shared_data: Path) -> tuple[str, str]:
    ex = read_examples(shared_data / MINI).examples[0]
    return ex.question, ex.context


def _window(tokenizer, cfg, question: str, context: str):
    from structqa.data.records import Example

    fc = FeatureConfig(cfg.data.max_seq_len, cfg.data.doc_stride, cfg.data.max_query_len)
    features, _ = featurize([Example("x", question, context)], tokenizer, fc)
    return features


@pytest.mark.parametrize("head", ["dyref", "dyrex", "independent"])
def test_weights_have_window_length_and_lie_in_unit_interval(trained, qa, head):
    model, tokenizer, cfg = model_from_checkpoint(trained(head))
    att = explain(model, tokenizer, cfg, *qa)
    (feature,) = _window(tokenizer, cfg, *qa)
    n = len(feature)
    assert len(att.tokens) == len(att.segments) == n and att.offsets.shape == (n, 2)
    for w in (att.start_weights, att.end_weights):
        assert w.shape == (n,) and np.isfinite(w).all()
        assert (w >= 0).all() and (w <= 1).all()
    if head == "independent":
        assert att.query_weights is None and att.kind == "static"
    else:
        qw = att.query_weights
        assert qw.shape == (2, 2) and np.isfinite(qw).all() and ((qw >= 0) & (qw <= 1)).all()
        assert att.kind == head
    # the answer is the Predictor's, and its char and token spans agree
    expected = Predictor(model, tokenizer, cfg, bf16="off").predict(*qa)
    assert att.answer == expected.text and att.answer
    assert att.answer_chars == (expected.start, expected.end)
    a, b = att.answer_tokens
    assert 0 < a <= b < n and all(s == "context" for s in att.segments[a : b + 1])
    assert att.offsets[a, 0] <= att.answer_chars[0] < att.answer_chars[1] <= att.offsets[b, 1]
    assert att.tokens[0] == "[CLS]" and att.segments[1] == "question"


def test_dyref_map_is_the_max_over_layers_and_heads(trained, qa):
    model, tokenizer, cfg = model_from_checkpoint(trained("dyref"))
    att = explain(model, tokenizer, cfg, *qa)
    batch = collate(_window(tokenizer, cfg, *qa), [0])
    with torch.no_grad():
        attentions = model(batch, output_attentions=True).attentions  # per layer (1, H, 2+N, 2+N)
    assert len(attentions) == model.encoder.config.num_layers
    expected = np.zeros_like(attentions[0][0, 0].numpy())
    for layer in attentions:
        for head in layer[0]:
            expected = np.maximum(expected, head.numpy())
    np.testing.assert_allclose(att.query_weights, expected[:2, :2], atol=1e-6)
    np.testing.assert_allclose(att.start_weights, expected[0, 2:], atol=1e-6)
    np.testing.assert_allclose(att.end_weights, expected[1, 2:], atol=1e-6)
    assert "max" in att.aggregation and "2D max pooling" in att.aggregation


def test_dyrex_step_by_step_queries_equal_the_head(trained, shared_data):
    model, tokenizer, _ = model_from_checkpoint(trained("dyrex"))
    examples = list(read_examples(shared_data / MINI).examples)
    features, _ = featurize(examples, tokenizer, FeatureConfig(64, 24, 16))
    batch = collate(features, list(range(len(features))))  # windows of unequal length: padding
    assert not batch.attention_mask.bool().all()
    with torch.no_grad():
        hidden = model.encoder(
            batch.input_ids, batch.attention_mask, batch.token_type_ids
        ).last_hidden_state
        source = model.head.queries
        head_queries = source(hidden, batch).queries
        trace = dyrex_trace(source, hidden, batch)
    torch.testing.assert_close(trace.queries, head_queries, atol=1e-5, rtol=0)
    k, b, h = len(source.layers), len(features), model.encoder.config.num_heads
    n = batch.input_ids.shape[1]
    assert trace.cross_weights.shape == (k, b, h, 2, n)
    assert trace.self_weights.shape == (k, b, h, 2, 2)
    # probabilities over the keys, none on padding
    torch.testing.assert_close(trace.cross_weights.sum(-1), torch.ones(k, b, h, 2))
    pad = ~batch.attention_mask.bool()[None, :, None, None, :].expand_as(trace.cross_weights)
    assert trace.cross_weights[pad].abs().max() == 0


def test_dyrex_map_is_the_max_of_the_cross_attention(trained, qa):
    model, tokenizer, cfg = model_from_checkpoint(trained("dyrex"))
    att = explain(model, tokenizer, cfg, *qa)
    batch = collate(_window(tokenizer, cfg, *qa), [0])
    with torch.no_grad():
        hidden = model.encoder(
            batch.input_ids, batch.attention_mask, batch.token_type_ids
        ).last_hidden_state
        trace = dyrex_trace(model.head.queries, hidden, batch)
    cross = trace.cross_weights[:, 0].amax(dim=(0, 1)).numpy()  # (2, N)
    np.testing.assert_allclose(att.start_weights, cross[0], atol=1e-6)
    np.testing.assert_allclose(att.end_weights, cross[1], atol=1e-6)
    np.testing.assert_allclose(att.query_weights, trace.self_weights[:, 0].amax((0, 1)), atol=1e-6)


@pytest.mark.parametrize("head", ["independent", "joint"])
def test_static_heads_show_start_and_end_distributions(trained, qa, head):
    model, tokenizer, cfg = model_from_checkpoint(trained(head))
    att = explain(model, tokenizer, cfg, *qa)
    assert att.kind == "static" and att.query_weights is None
    assert "no query attention" in att.aggregation
    for w in (att.start_weights, att.end_weights):
        assert w.sum() == pytest.approx(1.0, abs=1e-5) and (w >= 0).all()
        assert w[np.array(att.segments) == "question"].max() < 1e-6  # masked: not a span
    if head == "independent":
        batch = collate(_window(tokenizer, cfg, *qa), [0])
        with torch.no_grad():
            out = model(batch)
        np.testing.assert_allclose(att.start_weights, out.start_logits[0].softmax(-1), atol=1e-6)


def test_span_marginals_match_brute_force():
    g = torch.Generator().manual_seed(0)
    n, L = 6, 3
    spans, null = torch.randn(n, L, generator=g), torch.randn((), generator=g)
    spans[n - 1, 1:] = -1e4  # past the end, as the band scorer leaves them
    spans[n - 2, 2] = -1e4
    start, end = span_marginals(spans, null)
    z = spans.double().exp().sum() + null.double().exp()
    for i in range(n):
        assert start[i] == pytest.approx(
            (spans[i].double().exp().sum() + (null.double().exp() if i == 0 else 0)) / z
        )
        ends = sum(spans[i - k, k].double().exp() for k in range(L) if i - k >= 0)
        assert end[i] == pytest.approx((ends + (null.double().exp() if i == 0 else 0)) / z)
    assert float(start.sum()) == pytest.approx(1.0) and float(end.sum()) == pytest.approx(1.0)


def test_long_context_uses_the_window_with_the_answer(trained, qa):
    model, tokenizer, cfg = model_from_checkpoint(trained("dyref"))
    question, context = qa
    long_context = " ".join([context] * 4)
    att = explain(model, tokenizer, cfg, question, long_context)
    assert att.num_windows > 1
    expected = Predictor(model, tokenizer, cfg, bf16="off").predict(question, long_context)
    assert (att.answer, att.answer_chars) == (expected.text, (expected.start, expected.end))
    window = _window(tokenizer, cfg, question, long_context)[att.window]
    inside = window.offsets[window.offsets[:, 0] >= 0]
    assert inside[0, 0] <= att.answer_chars[0] and att.answer_chars[1] <= inside[-1, 1]
    assert len(att.tokens) == len(window) == len(att.start_weights)


def test_html_shows_the_answer_in_bold_and_every_token(trained, qa, tmp_path):
    model, tokenizer, cfg = model_from_checkpoint(trained("dyref"))
    att = explain(model, tokenizer, cfg, *qa)
    page = render_html(att, tmp_path / "a.html").read_text(encoding="utf-8")
    assert f"<b>{html.escape(att.answer)}</b>" in page
    for tok in att.tokens:
        assert html.escape(tok) in page
    assert html.escape(att.aggregation) in page and html.escape(att.question) in page
    assert "<script" not in page and "http" not in page  # self-contained


def _block_imports(monkeypatch, *names: str) -> None:
    for name in names:
        for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            monkeypatch.delitem(sys.modules, mod)
        monkeypatch.setitem(sys.modules, name, None)  # `import name` raises ImportError


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(
            "matplotlib", marks=pytest.mark.skipif(not HAS_MATPLOTLIB, reason="no matplotlib")
        ),
        pytest.param("pillow", marks=pytest.mark.skipif(not HAS_PILLOW, reason="no Pillow")),
    ],
)
def test_png_is_a_valid_png(trained, qa, tmp_path, monkeypatch, backend):
    model, tokenizer, cfg = model_from_checkpoint(trained("dyref"))
    att = explain(model, tokenizer, cfg, *qa)
    if backend == "pillow":
        _block_imports(monkeypatch, "matplotlib")
    data = render_png(att, tmp_path / "a.png").read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 500 and height > 300  # the IHDR chunk: a picture, not a stub


def test_png_without_a_renderer_names_the_install(trained, qa, tmp_path, monkeypatch):
    model, tokenizer, cfg = model_from_checkpoint(trained("independent"))
    att = explain(model, tokenizer, cfg, *qa)
    _block_imports(monkeypatch, "matplotlib", "PIL")
    with pytest.raises(RendererMissing, match="pip install matplotlib"):
        render_png(att, tmp_path / "a.png")


@pytest.mark.skipif(not (HAS_MATPLOTLIB or HAS_PILLOW), reason="no PNG renderer installed")
def test_cli_writes_the_three_files(trained, qa, tmp_path, capsys):
    out = tmp_path / "explain"
    question, context = qa
    args = ["explain", str(trained("dyrex")), "--question", question, "--context", context]
    assert main([*args, "--out", str(out), "--bf16", "off"]) == 0
    printed = capsys.readouterr().out
    for name in ("attention.png", "attention.html", "attention.json"):
        assert (out / name).stat().st_size > 0 and str(out / name) in printed
    assert (out / "attention.png").read_bytes()[:8] == PNG_MAGIC
    saved = json.loads((out / "attention.json").read_text())
    assert saved["kind"] == "dyrex" and saved["answer"] in printed
    assert len(saved["start_weights"]) == len(saved["tokens"]) == len(saved["end_weights"])


def test_cli_without_a_renderer_still_writes_json_and_html(
    trained, qa, tmp_path, capsys, monkeypatch
):
    _block_imports(monkeypatch, "matplotlib", "PIL")
    out = tmp_path / "explain"
    question, context = qa
    args = ["explain", str(trained("dyref")), "--question", question, "--context", context]
    assert main([*args, "--out", str(out), "--bf16", "off"]) == 1
    assert "pip install matplotlib" in capsys.readouterr().err
    assert (out / "attention.json").exists() and (out / "attention.html").exists()
    assert not (out / "attention.png").exists()


def test_whole_words_decodes_as_the_predictor_does(trained, tmp_path, capsys):
    """``whole_words`` gives the answer ``Predictor`` gives with the same setting, and leaves
    the caller's config alone; the CLI flag reaches it."""
    ckpt = trained("dyrex")
    model, tokenizer, cfg = model_from_checkpoint(ckpt)
    # glued words: WordPiece splits them, so a span can start or end inside one
    question = "Who won the Superbowlfifty in which yearly thing?"
    context = (
        "Superbowlfifty was wonby the DenverBroncos in twentysixteen, unbeatably, "
        "againstthe CarolinaPanthers at LevisStadium nearSanFrancisco."
    )
    expected = {}
    for flag in (False, True):
        predictor = Predictor(model, tokenizer, cfg, bf16="off")
        predictor.decode = replace(predictor.decode, whole_words=flag)
        expected[flag] = predictor.predict(question, context).text
    assert expected[False] != expected[True]  # the setting matters for this context
    for flag in (False, True):
        att = explain(model, tokenizer, cfg, question, context, bf16="off", whole_words=flag)
        assert att.answer == expected[flag]
        assert cfg.decode.whole_words is False
    args = ["explain", str(ckpt), "--question", question, "--context", context, "--bf16", "off"]
    assert main([*args, "--out", str(tmp_path / "e"), "--whole-words"]) in (0, 1)
    assert f"answer: {expected[True]!r}" in capsys.readouterr().out
