"""GenBERT / NC-BERT on the tiny checkpoint: features, weight sharing, causality, the marginal
loss (Eq. 4) against a hand computation, an overfit run, and the NC-BERT options."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from structqa.attention.masks import materialize
from structqa.attention.nc_masks import NCMaskConfig, type_number
from structqa.data.drop import DropAnswer, DropExample
from structqa.encoders.bert import BertEncoder
from structqa.features.drop_features import (
    GENERATE,
    PASSAGE_SPAN,
    QUESTION_SPAN,
    DropFeatureConfig,
    collate_drop,
    featurize_drop_examples,
)
from structqa.features.numbers import from_lsdf
from structqa.models.build import load_tokenizer, set_dropout
from structqa.models.genbert import GenBERT, GenBERTConfig, tokens_to_text

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest

EXAMPLES = (
    DropExample(
        id="number",
        passage_id="p1",
        question="How many more points did the Bears score than the Lions?",
        passage="The Bears scored 24 points and the Lions scored 17 points in the game.",
        answer=DropAnswer(number="7"),
    ),
    DropExample(
        id="passage-span",
        passage_id="p2",
        question="Who threw the pass to Smith?",
        passage="Smith caught a 12 yard pass from Jones in the second quarter.",
        answer=DropAnswer(spans=("Jones",)),
    ),
    DropExample(
        id="question-span",
        passage_id="p3",
        question="Which was longer, the 45 yard field goal or the 30 yard field goal?",
        passage="Kasay kicked a field goal of 45 yards and Brown kicked one of 30 yards.",
        answer=DropAnswer(spans=("45 yard field goal",)),
    ),
)


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint: Path):
    return load_tokenizer(tiny_checkpoint)


def build(tiny_checkpoint: Path, cfg: GenBERTConfig | None = None, seed: int = 0) -> GenBERT:
    torch.manual_seed(seed)
    model = GenBERT(BertEncoder.from_pretrained(tiny_checkpoint), cfg or GenBERTConfig())
    set_dropout(model, 0.0, 0.0)
    return model


def batch_of(tokenizer, lsdf: bool = False):
    features, report = featurize_drop_examples(EXAMPLES, tokenizer, DropFeatureConfig(lsdf=lsdf))
    return features, report, collate_drop(features)


# ---- features -----------------------------------------------------------------------------


def test_features_realizations(tokenizer):
    features, report, batch = batch_of(tokenizer)
    number, pspan, qspan = features
    assert [f.answer_type for f in features] == [GENERATE, PASSAGE_SPAN, QUESTION_SPAN]
    # "7" is not glued out of "17": the number answer has only the decoder realization
    assert len(number.passage_spans) == 0 and len(number.question_spans) == 0
    assert tokenizer.convert_ids_to_tokens(number.decoder_target.tolist()) == [
        "[CLS]",
        "7",
        "[SEP]",
    ]
    ((s, e),) = pspan.passage_spans.tolist()
    assert pspan.span_text(s, e) == "Jones" and pspan.segment[s] == 1
    ((s, e),) = qspan.question_spans.tolist()
    assert qspan.span_text(s, e) == "45 yard field goal" and qspan.segment[s] == 0
    # numbers are digit tokens; DICE positions point at each passage number's first digit
    assert [number.input_ids[p] for p in number.number_positions] == [
        tokenizer.convert_tokens_to_ids(t) for t in ("2", "1")
    ]
    assert number.number_values.tolist() == [24.0, 17.0]
    assert report.examples == 3 and report.without_realization == 0
    assert batch.input_ids.shape == batch.is_number.shape == batch.is_word.shape
    # the type-number channel's words: no specials, numbers or punctuation ("?" and ".")
    words = [number.span_text(i, i) for i in range(len(number)) if batch.is_word[0, i].item()]
    tokens = [number.span_text(i, i) for i in range(1, len(number) - 1)]
    assert "?" in tokens and "." in tokens and "2" in tokens  # in the sequence, not words:
    assert "?" not in words and "." not in words and "2" not in words
    assert "and" in words and all(any(c.isalnum() for c in w) for w in words)
    assert batch.passage_spans.shape[-1] == 2 and batch.decoder_mask.sum(-1).tolist() == [
        len(f.decoder_target) for f in features
    ]


def test_a_number_answer_is_no_span_of_a_larger_number(tokenizer):
    from structqa.features.drop_features import _find_spans

    passage = "3.7 million, 2,500 fans; 7.5 yards and 7 points, a 45-yard run"
    offsets = np.asarray([(m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]", passage)])

    def found(needle: str) -> list[str]:
        spans, _ = _find_spans(passage, needle, offsets)
        return [passage[offsets[s, 0] : offsets[e, 1]] for s, e in spans]

    assert found("7") == ["7"]  # the points, not the 7 of 3.7 or of 7.5
    assert found("500") == [] and found("3") == [] and found("2,500") == ["2,500"]
    assert found("45") == ["45"]  # a hyphen is a boundary
    # words keep the old boundaries: a digit and a comma before a name do not hide it
    named = "In 1995,Smith won"
    named_offsets = np.asarray([(m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]", named)])
    assert _find_spans(named, "Smith", named_offsets)[0] == [(3, 3)]


def test_a_number_answer_that_is_no_plain_number_is_learned_as_written(tokenizer, caplog):
    """ "5 million" or "1/2" in a number field fails no run: it is the decoder's target as
    written (the official metric reads it so too), counted and warned of."""
    import logging

    odd = [
        DropExample("m", "p", "How many?", "About 5 million fans came.", DropAnswer("5 million")),
        DropExample("h", "p", "How much?", "It was 1/2 of it.", DropAnswer("1/2")),
    ]
    with caplog.at_level(logging.WARNING):
        features, report = featurize_drop_examples(odd, tokenizer, DropFeatureConfig(lsdf=True))
    assert report.numbers_as_written == ["m: '5 million'", "h: '1/2'"]
    assert "2 number answers are not plain numbers" in caplog.text
    assert [f.answer_text for f in features] == ["5 million", "1/2"]
    tokens = tokenizer.convert_ids_to_tokens(features[0].decoder_target.tolist())
    assert tokens_to_text(tokens[1:-1], use_lsdf=True).startswith("5")  # not reversed


def test_dice_reads_a_negative_number_at_its_first_digit(tokenizer):
    example = DropExample("n", "p", "How cold?", "It fell to -7 and then 12.", DropAnswer("5"))
    (f,), _ = featurize_drop_examples([example], tokenizer, DropFeatureConfig())
    assert [f.span_text(p, p) for p in f.number_positions] == ["7", "1"]
    assert f.number_values.tolist() == [-7.0, 12.0]


def test_truncation_keeps_first_window_and_whole_numbers(tokenizer):
    # tiny vocabulary: the passage's 13th and 14th tokens are the digits of "24"; a budget of
    # 13 passage tokens would split it, so the cut moves back before the number
    cfg = DropFeatureConfig(max_seq_len=10 + 13 + 3, max_question_len=10)
    features, report = featurize_drop_examples([EXAMPLES[0]], tokenizer, cfg)
    (f,) = features
    assert report.truncated_passages == report.truncated_questions == 1
    assert f.is_question.sum() == 10 and f.is_passage.sum() == 12 and len(f) == 25
    assert not f.is_number.any() and len(f.number_positions) == 0
    assert f.span_text(12, 23) == "The Bears scored"
    # one more token of budget keeps "24" whole
    cfg = DropFeatureConfig(max_seq_len=10 + 14 + 3, max_question_len=10)
    (f,), _ = featurize_drop_examples([EXAMPLES[0]], tokenizer, cfg)
    assert f.number_values.tolist() == [24.0] and f.is_number.sum() == 2


# ---- model --------------------------------------------------------------------------------


def test_shapes_and_finiteness(tiny_checkpoint, tokenizer):
    model = build(tiny_checkpoint)
    features, _, batch = batch_of(tokenizer)
    out = model(batch)
    b, n = batch.input_ids.shape
    t = batch.decoder_target.shape[1]
    v = model.encoder.config.vocab_size
    assert out.type_logits.shape == (b, 3)
    for logits in (out.question_start_logits, out.passage_end_logits):
        assert logits.shape == (b, n) and torch.isfinite(logits).all()
    assert out.decoder_logits is not None and out.decoder_logits.shape == (b, t - 1, v)
    assert torch.isfinite(out.decoder_logits).all()
    assert out.type_log_likelihood is not None and out.type_log_likelihood.shape == (b, 3)
    assert out.loss is not None and torch.isfinite(out.loss) and out.loss.dim() == 0
    # span logits are NEG off their own segment
    assert (out.question_start_logits[batch.is_passage] <= -1e4).all()
    assert (out.passage_start_logits[batch.is_question] <= -1e4).all()
    model.eval()
    preds = model.predict(batch, features, tokenizer)
    assert len(preds) == b and all(isinstance(p.text, str) for p in preds)


def test_an_answer_that_never_ends_stops_at_max_decode_len(tiny_checkpoint, tokenizer):
    """Without a [SEP], an answer once kept max_decode_len + 1 tokens (the step that could
    have been its [SEP])."""
    model = build(tiny_checkpoint, GenBERTConfig(max_decode_len=3))
    features, _, batch = batch_of(tokenizer)
    model.eval()
    seven = int(tokenizer.convert_tokens_to_ids("7"))
    vocab = model.encoder.config.vocab_size

    def never_ends(ys: torch.Tensor, memory, memory_mask) -> torch.Tensor:  # noqa: ARG001
        logits = torch.zeros(ys.shape[0], ys.shape[1], vocab)
        logits[..., seven] = 1.0
        return logits

    generate = torch.zeros(3)
    generate[GENERATE] = 10.0
    model.decode = never_ends  # type: ignore[method-assign]
    model.type_head.forward = lambda h: generate.expand(h.shape[0], 3)  # type: ignore[method-assign]
    preds = model.predict(batch, features, tokenizer)
    assert [p.text.replace(" ", "") for p in preds] == ["777"] * len(preds)
    assert all(p.capped for p in preds)  # said, so that predict_drop can count them


def test_decoder_shares_encoder_weights(tiny_checkpoint, tokenizer):
    model = build(tiny_checkpoint)
    for i, block in enumerate(model.encoder.layers):
        kinds = dict(model.decoder_sublayers(i))
        assert kinds["sa"] is block.sublayers[0] and kinds["ffn"] is block.sublayers[1]
        assert kinds["sa"].attn.query.weight is block.sublayers[0].attn.query.weight
        assert kinds["xa"] is model.cross_attention[i]
    # every parameter exists once (no decoder copies), and the decoder's own are only xa
    names = [name for name, _ in model.named_parameters()]
    assert len(names) == len(set(names)) == len(model.state_dict())
    assert not any(name.startswith("decoder") for name in names)
    # a decoder-only loss reaches the encoder's self-attention Parameters
    _, _, batch = batch_of(tokenizer)
    memory = torch.randn(len(batch), batch.input_ids.shape[1], model.encoder.hidden_size)
    logits = model.decode(batch.decoder_target[:, :-1], memory, model.memory_mask(batch))
    logits.sum().backward()
    grad = model.encoder.layers[0].sublayers[0].attn.query.weight.grad
    assert grad is not None and grad.abs().sum() > 0


def test_decoder_is_causal(tiny_checkpoint, tokenizer):
    model = build(tiny_checkpoint).eval()
    _, _, batch = batch_of(tokenizer)
    memory = torch.randn(len(batch), batch.input_ids.shape[1], model.encoder.hidden_size)
    prefix = torch.tensor([[2, 10, 11, 12, 13]]).repeat(len(batch), 1)
    changed = prefix.clone()
    changed[:, 3] = 20
    with torch.no_grad():
        a = model.decode(prefix, memory, model.memory_mask(batch))
        b = model.decode(changed, memory, model.memory_mask(batch))
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_marginal_loss_matches_hand_computation(tiny_checkpoint, tokenizer):
    model = build(tiny_checkpoint).eval()
    features, _, batch = batch_of(tokenizer)
    with torch.no_grad():
        out = model(batch)
    assert out.decoder_logits is not None and out.loss is not None
    losses = []
    for row, f in enumerate(features):
        log_type = torch.log_softmax(out.type_logits[row].double(), -1)
        terms = []
        if len(f.decoder_target):
            logp = torch.log_softmax(out.decoder_logits[row].double(), -1)
            target = f.decoder_target.tolist()
            ll = sum(logp[t - 1, target[t]] for t in range(1, len(target)))
            terms.append(log_type[GENERATE] + ll)
        for kind, spans, start, end in (
            (QUESTION_SPAN, f.question_spans, out.question_start_logits, out.question_end_logits),
            (PASSAGE_SPAN, f.passage_spans, out.passage_start_logits, out.passage_end_logits),
        ):
            if len(spans):
                ls = torch.log_softmax(start[row].double(), -1)
                le = torch.log_softmax(end[row].double(), -1)
                p = sum(math.exp(ls[s] + le[e]) for s, e in spans.tolist())
                terms.append(log_type[kind] + math.log(p))
        losses.append(-torch.logsumexp(torch.stack([torch.as_tensor(t) for t in terms]), 0))
    expected = torch.stack(losses).mean()
    torch.testing.assert_close(out.loss.double(), expected, rtol=1e-5, atol=1e-5)
    # the number row has only the decoder: its span likelihoods are impossible
    assert (out.type_log_likelihood[0, 1:] < -1e8).all()


def test_overfit_three_examples(tiny_checkpoint, tokenizer):
    model = build(tiny_checkpoint)
    features, _, batch = batch_of(tokenizer)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        out = model(batch)
        assert out.loss is not None
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        losses.append(out.loss.item())
    assert losses[-1] < 0.1 * losses[0]
    model.eval()
    preds = model.predict(batch, features, tokenizer)
    assert preds[0].text == "7" and preds[0].answer_type == "generate"
    assert preds[1].text.lower() == "jones"
    assert preds[2].text.lower() == "45 yard field goal"
    with torch.no_grad():
        out = model(batch)
    # the span heads alone also reproduce the gold spans
    assert out.passage_start_logits[1].argmax() == features[1].passage_spans[0, 0]
    assert out.question_end_logits[2].argmax() == features[2].question_spans[0, 1]


def test_nc_layer_decoder_number_mask_and_dice(tiny_checkpoint, tokenizer):
    cfg = GenBERTConfig(
        nc_layer=True,
        nc_heads=(0, 1),
        nc_mask=NCMaskConfig(entity_channel=True, type_channel=True),
        decoder_number_mask=True,
        dice_weight=1.0,
        dice_pairs=2,
    )
    model = build(tiny_checkpoint, cfg)
    _, _, batch = batch_of(tokenizer)
    out = model(batch)
    assert out.loss is not None and out.dice is not None and out.answer_loss is not None
    assert torch.isfinite(out.loss) and out.dice > 0
    out.loss.backward()
    assert model.nc_layer is not None
    for p in list(model.nc_layer.parameters()) + list(model.cross_attention.parameters()):
        assert p.grad is not None and torch.isfinite(p.grad).all()
    # the decoder-number channel: keys are numbers and question tokens only
    mask = model.memory_mask(batch)[:, 0, 0]  # (B, N)
    assert torch.equal(mask, (batch.is_number | batch.is_question) & batch.attention_mask.bool())


def test_type_number_words_of_a_passage_number_stay_in_the_passage(tiny_checkpoint, tokenizer):
    """The passage opens with a number: within k = 6 tokens to its left lie the [SEP] and the
    question's words, which the type-number channel must not give it."""
    example = DropExample(
        "t",
        "p",
        "How many points did the Bears score?",
        "24 points and 17 points.",
        DropAnswer("7"),
    )
    (f,), _ = featurize_drop_examples([example], tokenizer, DropFeatureConfig())
    batch = collate_drop([f])
    cfg = GenBERTConfig(nc_layer=True, nc_mask=NCMaskConfig(type_words=4, type_window=6))
    (_, type_channel) = build(tiny_checkpoint, cfg).encoder_channels(batch)
    n = len(f)
    allowed = materialize(type_channel, 1, 1, n, n, "cpu")[0, 0]
    first = int(f.number_positions[0])  # the "2" of 24, the passage's first token
    assert f.segment[first - 1] != f.segment[first]  # the [SEP] just before it
    keys = [i for i in range(n) if allowed[first, i]]
    assert keys and all(f.segment[i] == f.segment[first] for i in keys)
    # the same window over the whole sequence would take the question's last pieces
    crossing = type_number(batch.is_number, batch.is_word, 4, 6, batch.number_index)
    reach = materialize(crossing, 1, 1, n, n, "cpu")[0, 0, first]
    assert any(f.segment[i] != f.segment[first] for i in range(n) if reach[i])


def test_lsdf_targets_read_back(tokenizer):
    example = DropExample("n", "p", "How many?", "It was 120 or 7.", DropAnswer(number="127"))
    features, _ = featurize_drop_examples([example], tokenizer, DropFeatureConfig(lsdf=True))
    tokens = tokenizer.convert_ids_to_tokens(features[0].decoder_target.tolist())
    assert tokens == ["[CLS]", "7", "##2", "##1", "[SEP]"]
    assert from_lsdf(tokens[1:-1]) == "127" == tokens_to_text(tokens[1:-1], use_lsdf=True)
    assert tokens_to_text(["1", "##2", "##7"]) == "127" and tokens_to_text(["-", "7"]) == "-7"
    # decoding reads every plain-number output back from LSDF: a year-only date and a
    # digit-only span are written reversed too, and a date in words is not
    cfg = DropFeatureConfig(lsdf=True, decode_spans=True)
    for answer, text, reversed_ in (
        (DropAnswer(date=("", "", "1990")), "1990", True),
        (DropAnswer(spans=("25",)), "25", True),
        (DropAnswer(date=("4", "March", "1990")), "4 March 1990", False),
    ):
        (f,), _ = featurize_drop_examples(
            [DropExample("d", "p", "When?", "Then.", answer)], tokenizer, cfg
        )
        tokens = tokenizer.convert_ids_to_tokens(f.decoder_target.tolist())[1:-1]
        assert tokens_to_text(tokens, use_lsdf=True) == text.lower()  # (an uncased vocabulary)
        assert (tokens[0] == text[-1]) is reversed_


def test_decoded_numbers_glue_only_into_one_number():
    assert tokens_to_text(["1", ",", "000"]) == "1,000"
    assert tokens_to_text(["3", ".", "5"]) == "3.5"
    # two numbers stay two: glued, DROP would read "3,5" and "1990,1992" as one number
    assert tokens_to_text(["3", ",", "5"]) == "3 , 5"
    pieces = ["1", "##9", "##9", "##0", ",", "1", "##9", "##9", "##2"]
    assert tokens_to_text(pieces) == "1990 , 1992"


def test_a_generated_multi_span_answer_is_scored_as_its_spans():
    from structqa.metrics.drop import get_metrics
    from structqa.models.genbert import GenBERTPrediction, generated_spans

    passage = "Kasay kicked and Smith ran. He was born in Jacksonville, Florida in 1990."
    question = "Who scored?"
    text = tokens_to_text(("kasay", ",", "smith"))
    spans = generated_spans(text, question, passage)
    assert spans == ("kasay", "smith")
    generated = GenBERTPrediction(text, "generate", (0.0, 0.0, 1.0), tokens=("x",), spans=spans)
    assert get_metrics(generated.answer, ["Kasay", "Smith"]) == (1.0, 1.0)
    assert get_metrics(generated.text, ["Kasay", "Smith"])[0] == 0.0  # the string alone
    assert generated_spans("1990 , 1992", question, passage) == ("1990", "1992")
    # one span with a comma of its own, as the passage writes it, stays one
    assert generated_spans("jacksonville , florida", question, passage) == ()
    assert generated_spans("smith", question, passage) == ()
    span = GenBERTPrediction("Kasay, Smith", "passage_span", (0.0, 1.0, 0.0), span=(3, 5))
    assert span.answer == "Kasay, Smith"


def test_two_generated_numbers_are_two_spans_where_the_passage_writes_them_apart():
    from structqa.models.genbert import read_generated

    tokens = ("100", ",", "200")
    passage = "The first drive gained 100 yards, the second 200 yards."
    # one number with a thousands group, unless the passage writes both and not that number
    assert read_generated(tokens, False, "How far?", passage) == ("100 , 200", ("100", "200"))
    assert read_generated(tokens, False, "How many?", "About 100,200 people, 100 or 200 more.") == (
        "100,200",
        (),
    )
    assert read_generated(("1", ",", "000"), False, "How many?", "1 of 3,000 or 1,000.") == (
        "1,000",
        (),
    )
    # a number inside a larger one is not written: "200" of "1200"
    assert read_generated(tokens, False, "How far?", "100 yards, then 1200 yards.") == (
        "100,200",
        (),
    )
    assert read_generated(("kasay", ",", "smith"), False, "Who?", "Kasay and Smith.") == (
        "kasay , smith",
        ("kasay", "smith"),
    )


def test_replaced_heads_patterns():
    from structqa.models.genbert import replaced_heads

    assert replaced_heads("all_layers", 2, 4) == {0: [0, 1, 2, 3], 1: [0, 1, 2, 3]}
    assert replaced_heads("last_all", 3, 4) == {2: [0, 1, 2, 3]}
    assert replaced_heads("last_single", 3, 4) == {2: [0]}
    assert replaced_heads("last_odd", 3, 4) == {2: [1, 3]}
    assert replaced_heads("last_even", 3, 4) == {2: [0, 2]}
    with pytest.raises(ValueError, match="nc_replace must be one of"):
        GenBERTConfig(nc_replace="middle")


@pytest.mark.parametrize("placement", ["last_single", "last_odd", "all_layers"])
def test_nc_mask_on_pretrained_heads(tiny_checkpoint, tokenizer, placement):
    """Table 4 placement: in the chosen heads of the pretrained layers a number token gives
    attention only to keys its channels allow; every other head attends as before."""
    from structqa.models.genbert import replaced_heads

    nc = NCMaskConfig(entity_channel=False, type_channel=True, type_words=2, type_window=3)
    model = build(tiny_checkpoint, GenBERTConfig(nc_replace=placement, nc_mask=nc)).eval()
    plain = build(tiny_checkpoint).eval()
    _, _, batch = batch_of(tokenizer)
    args = (batch.input_ids, batch.attention_mask, batch.token_type_ids)
    masks = model.replaced_layer_masks(batch)
    ecfg = model.encoder.config
    chosen = replaced_heads(placement, ecfg.num_layers, ecfg.num_heads)
    assert masks is not None and [m is not None for m in masks] == [
        i in chosen for i in range(ecfg.num_layers)
    ]
    with torch.no_grad():
        masked = model.encoder(*args, layer_masks=masks, output_attentions=True).attentions
        free = plain.encoder(*args, output_attentions=True).attentions
        assert not torch.equal(model.encode(batch), plain.encode(batch))
    rows = batch.is_number  # (B, N) number-token query rows
    for i in range(ecfg.num_layers):
        b, h, n, _ = masked[i].shape
        allowed = materialize(masks[i], b, h, n, n, rows.device) if masks[i] is not None else None
        for head in range(ecfg.num_heads):
            if i in chosen and head in chosen[i]:
                leak = masked[i][:, head].masked_fill(allowed[:, head], 0.0)  # forbidden keys
                assert float(leak[rows].abs().max()) < 1e-6
                assert bool((allowed[:, head][rows].sum(-1) < n).all())  # a real restriction
            else:
                torch.testing.assert_close(masked[i][:, head], free[i][:, head])
