"""Build a tiny random BERT checkpoint directory for fast model tests.

``make_tiny_checkpoint`` writes what an HF BERT checkpoint directory holds (vocab.txt, a fast
tokenizer, config.json, model.safetensors), so every loader in structqa treats it like the
bundled encoder, only with hidden 32, 2 layers and a vocabulary of a few hundred pieces.
"""

from __future__ import annotations

import inspect
import string
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_BASE_CHARS = string.ascii_lowercase + string.digits


def _words(texts: Iterable[str]) -> list[str]:
    """Pre-tokenized words of ``texts`` as an uncased BERT tokenizer sees them."""
    from tokenizers.normalizers import BertNormalizer
    from tokenizers.pre_tokenizers import BertPreTokenizer

    normalizer = BertNormalizer(lowercase=True, strip_accents=True)
    pre = BertPreTokenizer()
    words: list[str] = []
    for text in texts:
        words.extend(w for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(text)))
    return words


def build_vocab(texts: Iterable[str], max_words: int = 150) -> list[str]:
    """An uncased WordPiece vocabulary under which every text tokenizes without [UNK].

    Special tokens, ASCII punctuation, every character of the texts (plus a-z and 0-9) as a
    word-initial piece and as a ``##`` continuation, then the ``max_words`` most frequent
    multi-character words (ties broken alphabetically, so the vocabulary is deterministic).
    """
    words = _words(texts)
    chars = sorted(set(_BASE_CHARS) | {c for w in words for c in w} - set(string.punctuation))
    vocab = list(SPECIAL_TOKENS) + list(string.punctuation) + chars + [f"##{c}" for c in chars]
    known = set(vocab)
    counts = Counter(w for w in words if len(w) > 1 and w not in known)
    frequent = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:max_words]
    return vocab + [w for w, _ in frequent]


def _wordpiece_tokenizer(cls: type, vocab_file: Path):
    """``BertTokenizerFast`` from a vocab.txt: the argument is ``vocab_file`` in transformers 4
    and ``vocab`` in 5 (where an unknown ``vocab_file`` is silently ignored)."""
    params = inspect.signature(cls.__init__).parameters
    key = "vocab_file" if "vocab_file" in params else "vocab"
    return cls(**{key: str(vocab_file)}, do_lower_case=True)


def make_tiny_checkpoint(
    dir: str | Path,
    texts: Iterable[str],
    hidden: int = 32,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
) -> Path:
    """Write a tiny random BERT checkpoint (uncased WordPiece) to ``dir`` and return it.

    Files: vocab.txt, tokenizer.json (+ tokenizer_config.json), config.json (model_type bert,
    intermediate 2 * hidden, 512 positions) and model.safetensors from ``transformers.BertModel``.
    Weights are drawn with ``initializer_range=0.2`` and the layer-norm parameters and biases are
    perturbed too (also seeded), so attention is far from uniform and a mis-mapped weight shows
    up in comparisons. The same arguments always give the same files; the global torch RNG is
    left untouched.
    """
    from transformers import BertConfig, BertModel, BertTokenizerFast

    out = Path(dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab(texts)
    vocab_file = out / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = _wordpiece_tokenizer(BertTokenizerFast, vocab_file)
    if len(tokenizer) != len(vocab):
        raise RuntimeError(f"tokenizer has {len(tokenizer)} entries, vocab.txt {len(vocab)}")
    tokenizer.save_pretrained(str(out))

    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=2 * hidden,
        max_position_embeddings=512,
        initializer_range=0.2,
        pad_token_id=0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertModel(config)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("LayerNorm.weight"):
                    param.add_(0.1 * torch.randn_like(param))
                elif name.endswith("bias"):
                    param.normal_(0.0, 0.1)
    model.save_pretrained(str(out), safe_serialization=True)
    return out


MINI_SQUAD = "fixtures/squad-v1.1-mini.json"


def tiny_finetune_base(encoder: str | Path, data: Path) -> dict[str, Any]:
    """A fine-tuning base config that trains 2 steps on the mini fixture (the tiny runner
    experiments' ``base``)."""
    return {
        "model": {"encoder": str(encoder)},
        "data": {
            "dir": str(data),
            "train": MINI_SQUAD,
            "eval": MINI_SQUAD,
            "validation": None,  # best/ on data.eval, as the shipped experiment configs
            "train_size": "all",
            "max_seq_len": 128,
            "doc_stride": 32,
        },
        "train": {"batch_size": 2, "bf16": "off", "max_steps": 2, "log_every_steps": 1},
    }


def mini_train_args(
    command: str, data: Path, encoder: Path | str, out: Path, squad_file: str, steps: int
) -> list[str]:
    """`structqa COMMAND` arguments for a short fp32 run of ``encoder`` trained and scored on
    one small SQuAD file of ``data`` (every question), writing to ``out``."""
    return [
        command,
        f"--data={data}",
        f"--model.encoder={encoder}",
        f"--data.train={squad_file}",
        f"--data.eval={squad_file}",
        "--data.train_size=all",
        f"--train.output_dir={out}",
        f"--train.max_steps={steps}",
        "--train.bf16=off",
    ]


def interrupt_at_batch(monkeypatch, n: int = 1):
    """Make the trainer's ``n``-th batch from now raise a real SIGINT (once); returns the
    real ``loop.collate`` to restore."""
    import os
    import signal

    from structqa.training import loop

    real_collate = loop.collate
    calls = {"n": 0}

    def collate_then_interrupt(*a, **kw):
        calls["n"] += 1
        if calls["n"] == n:
            os.kill(os.getpid(), signal.SIGINT)
        return real_collate(*a, **kw)

    monkeypatch.setattr(loop, "collate", collate_then_interrupt)
    return real_collate


def load_script(name: str) -> ModuleType:
    """The module ``scripts/NAME.py`` (the scripts are not a package)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no script {path}")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def weights_sha256(directory: Path) -> str:
    """The SHA-256 of ``directory``'s model.safetensors, after checking every file of the
    directory against its manifest (so the hash is the one the checkpoint recorded)."""
    from structqa.manifest import file_sha256, read_manifest, verify_manifest

    assert verify_manifest(directory) is True
    records = read_manifest(directory)
    assert records is not None
    recorded = records["model.safetensors"].sha256
    assert recorded == file_sha256(directory / "model.safetensors")
    return recorded


def mini_squad_texts(data_dir: Path) -> list[str]:
    """Every context and question of the mini SQuAD fixture, in file order (read as raw JSON,
    independent of structqa's readers)."""
    import json

    texts: list[str] = []
    for article in json.loads((data_dir / MINI_SQUAD).read_text(encoding="utf-8"))["data"]:
        for paragraph in article["paragraphs"]:
            texts.append(paragraph["context"])
            texts.extend(qa["question"] for qa in paragraph["qas"])
    return texts
