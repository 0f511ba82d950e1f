"""The tied MLM head against transformers.BertForMaskedLM, and its checkpoint round trips."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import Tensor

from structqa.encoders import ANNA_BLOCK
from structqa.encoders.bert import BertEncoder
from structqa.pretrain.mlm_head import MaskedLM, MLMHead, ensure_mlm_head

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest

transformers = pytest.importorskip("transformers")

TOL = 1e-5


@pytest.fixture(scope="module")
def hf_mlm_dir(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BertForMaskedLM on the tiny config, its head perturbed away from HF's init, saved by
    transformers (which leaves the tied decoder weight out)."""
    config = transformers.BertConfig.from_pretrained(str(tiny_checkpoint))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        model = transformers.BertForMaskedLM(config)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
    out = tmp_path_factory.mktemp("tiny-mlm")
    model.save_pretrained(str(out))
    return out


def hf_mlm(path: Path):
    return transformers.BertForMaskedLM.from_pretrained(
        str(path), attn_implementation="eager"
    ).eval()


def inputs(b: dict[str, Tensor]) -> dict[str, Tensor]:
    """The batch without its labels: the model then returns every token's logits."""
    return {k: v for k, v in b.items() if k != "labels"}


def batch(vocab: int, seed: int = 0) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    ids[1, 6:] = 0
    labels = torch.full((2, 9), -100)
    labels[0, [1, 4]] = ids[0, [1, 4]]
    labels[1, 2] = 7
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def test_loaded_head_reproduces_bert_for_masked_lm(hf_mlm_dir: Path) -> None:
    from safetensors.torch import load_file

    saved = load_file(str(hf_mlm_dir / "model.safetensors"))
    assert "cls.predictions.transform.dense.weight" in saved
    assert "cls.predictions.decoder.weight" not in saved  # tied, so transformers omits it

    ours = MaskedLM.from_pretrained(hf_mlm_dir).eval()
    theirs = hf_mlm(hf_mlm_dir)
    b = batch(ours.encoder.config.vocab_size)
    with torch.no_grad():
        got = ours(**inputs(b))
        want = theirs(**b)
        labeled = ours(**b)
    real = b["attention_mask"].bool()
    assert got.logits.shape == (2, 9, ours.encoder.config.vocab_size)
    torch.testing.assert_close(got.logits[real], want.logits[real], rtol=TOL, atol=TOL)
    torch.testing.assert_close(labeled.loss, want.loss, rtol=TOL, atol=TOL)
    # with labels, only the labeled tokens' logits are computed, and they are the same
    sel = b["labels"] != -100
    assert labeled.logits.shape == (int(sel.sum()), ours.encoder.config.vocab_size)
    torch.testing.assert_close(labeled.logits, got.logits[sel], rtol=TOL, atol=TOL)
    # the head's own weights were loaded, not re-created
    torch.testing.assert_close(ours.head.bias, theirs.cls.predictions.bias, rtol=0, atol=0)


def test_decoder_shares_storage_with_the_word_embeddings(hf_mlm_dir: Path) -> None:
    model = MaskedLM.from_pretrained(hf_mlm_dir)
    emb = model.encoder.embeddings.word_embeddings.weight
    assert model.head.decoder.weight is emb
    assert model.head.decoder.weight.data_ptr() == emb.data_ptr()
    n_unique = len(list(model.parameters()))
    assert n_unique == len({p.data_ptr() for p in model.parameters()})
    # one optimizer step moves both "copies" together, with the sum of both gradients
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    before = emb.detach().clone()
    model(**batch(model.encoder.config.vocab_size, seed=1)).loss.backward()
    opt.step()
    assert not torch.equal(emb, before)
    assert torch.equal(model.head.decoder.weight, emb)


def test_head_is_created_when_the_checkpoint_has_none(tiny_checkpoint: Path) -> None:
    from safetensors.torch import load_file

    assert not any(
        k.startswith("cls.") for k in load_file(str(tiny_checkpoint / "model.safetensors"))
    )
    encoder = BertEncoder.from_pretrained(tiny_checkpoint)
    head = ensure_mlm_head(encoder, tiny_checkpoint)
    assert head.decoder.weight is encoder.embeddings.word_embeddings.weight
    assert not bool(head.bias.any())
    assert torch.equal(head.LayerNorm.weight, torch.ones(32))
    assert 0.01 < float(head.dense.weight.detach().std()) < 0.03  # BERT's N(0, 0.02)
    model = MaskedLM(encoder, head).eval()
    b = batch(encoder.config.vocab_size, seed=2)
    with torch.no_grad():
        out = model(**b)
    assert out.logits.shape == (3, encoder.config.vocab_size)  # the 3 labeled tokens
    assert bool(torch.isfinite(out.logits).all()) and out.loss is not None
    assert float(out.loss) > 0


def test_head_loads_from_an_hf_state_dict(hf_mlm_dir: Path) -> None:
    theirs = hf_mlm(hf_mlm_dir)
    state = theirs.state_dict()  # in memory the tied decoder weight and bias are present
    assert "cls.predictions.decoder.weight" in state
    encoder = BertEncoder.from_pretrained(hf_mlm_dir)
    head = ensure_mlm_head(encoder, state)
    hf_head = theirs.cls.predictions
    assert torch.equal(head.dense.weight, hf_head.transform.dense.weight)
    assert torch.equal(head.LayerNorm.bias, hf_head.transform.LayerNorm.bias)
    assert torch.equal(head.bias, hf_head.bias)
    with pytest.raises(ValueError, match="incomplete MLM head"):
        ensure_mlm_head(encoder, {"cls.predictions.bias": hf_head.bias.detach()})


def test_saved_model_reloads_here_and_in_transformers(hf_mlm_dir: Path, tmp_path: Path) -> None:
    model = MaskedLM.from_pretrained(hf_mlm_dir).eval()
    model.save_pretrained(tmp_path)
    b = batch(model.encoder.config.vocab_size, seed=3)
    real = b["attention_mask"].bool()
    with torch.no_grad():
        want = model(**inputs(b)).logits[real]
        again = MaskedLM.from_pretrained(tmp_path).eval()(**inputs(b)).logits[real]
        hf = hf_mlm(tmp_path)(**b).logits[real]
    assert torch.equal(again, want)
    torch.testing.assert_close(hf, want, rtol=TOL, atol=TOL)
    # the encoder alone still loads from the MLM directory (the head is skipped)
    enc = BertEncoder.from_pretrained(tmp_path)
    assert torch.equal(
        enc.embeddings.word_embeddings.weight, model.encoder.embeddings.word_embeddings.weight
    )


def test_bert_continues_as_anna_with_its_head(hf_mlm_dir: Path, tmp_path: Path) -> None:
    """Converting to SA -> NAA -> FFN keeps the MLM logits (added NAA starts as the identity),
    and the converted model saves and reloads with its block and head."""
    bert = MaskedLM.from_pretrained(hf_mlm_dir).eval()
    anna = MaskedLM.from_pretrained(hf_mlm_dir, block=ANNA_BLOCK).eval()
    assert anna.encoder.config.block == ANNA_BLOCK
    assert isinstance(anna.head, MLMHead)
    assert anna.head.decoder.weight is anna.encoder.embeddings.word_embeddings.weight
    b = batch(bert.encoder.config.vocab_size, seed=4)
    real = b["attention_mask"].bool()
    with torch.no_grad():
        want = bert(**inputs(b)).logits[real]
        got = anna(**inputs(b)).logits[real]
    torch.testing.assert_close(got, want, rtol=TOL, atol=TOL)
    anna.save_pretrained(tmp_path)
    reloaded = MaskedLM.from_pretrained(tmp_path).eval()
    assert reloaded.encoder.config.block == ANNA_BLOCK
    with torch.no_grad():
        assert torch.equal(reloaded(**inputs(b)).logits[real], got)


def test_untied_head_is_rejected(tiny_checkpoint: Path) -> None:
    a = BertEncoder.from_pretrained(tiny_checkpoint)
    b = BertEncoder.from_pretrained(tiny_checkpoint)
    with pytest.raises(ValueError, match="not tied"):
        MaskedLM(a, ensure_mlm_head(b))


def test_a_batch_with_nothing_masked_has_a_zero_loss_not_nan(tiny_checkpoint: Path) -> None:
    """A short window whose one word outruns the masking budget has no label: the loss over
    nothing was NaN, and one such step poisoned every weight."""
    model = MaskedLM.from_pretrained(tiny_checkpoint)
    ids = torch.tensor([[2, 7, 8, 3]])  # (ids inside the tiny vocabulary)
    labels = torch.full_like(ids, -100)
    out = model(ids, torch.ones_like(ids), labels=labels)
    assert out.loss is not None and torch.isfinite(out.loss) and float(out.loss.detach()) == 0.0
    out.loss.backward()  # the graph is kept: a step over it changes nothing
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(float(g.abs().sum()) == 0.0 for g in grads)
    labels[0, 1] = 7
    assert float(model(ids, torch.ones_like(ids), labels=labels).loss.detach()) > 0.0
