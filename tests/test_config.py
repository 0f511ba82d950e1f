"""Config overrides: each value is converted by its field's own type, errors name the key."""

from __future__ import annotations

import re

import pytest
import torch

from structqa.config import Config, ConfigError, config_from_dict, load_config
from structqa.training.optim import build_optimizer


def test_override_values_use_the_field_type_not_yaml():
    cfg = load_config(
        overrides=[
            "--train.output_dir=no",
            "train.lr=3e-5",
            "model.block=[sa, naa, ffn]",
            "train.max_steps=null",
            "train.eval_every_epoch=false",
            "data.eval_size=10",
            "data.train_size=0755",
        ]
    )
    assert cfg.train.output_dir == "no"  # YAML would have read a boolean
    assert cfg.data.train_size == "0755"  # YAML would have read an octal 493
    assert cfg.train.lr == 3e-5 and cfg.train.max_steps is None
    assert cfg.model.block == ["sa", "naa", "ffn"]
    assert cfg.train.eval_every_epoch is False and cfg.data.eval_size == 10


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.lrr=1", "did you mean 'lr'"),
        ("trian.lr=1", "did you mean 'train'"),
        ("train.batch_size=twelve", "expected int"),
        ("train.eval_every_epoch=maybe", "expected true/false"),
        ("train.lr", "section.key=value"),
    ],
)
def test_bad_overrides_are_named(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=[override])


def test_zero_head_lr_is_a_rate_not_unset():
    import torch

    from structqa.training.optim import build_optimizer

    model = torch.nn.Module()
    model.encoder = torch.nn.Linear(2, 2)
    model.head = torch.nn.Linear(2, 2)
    opt = build_optimizer(model, lr=1e-4, head_lr=0.0, weight_decay=0.0)
    rates = {g["lr"] for g in opt.param_groups}
    assert rates == {1e-4, 0.0}


def _toy_model() -> torch.nn.Module:
    """encoder.{weight,bias}, head.scorer.W (2x2, zero), head.proj.{weight,bias}."""
    model = torch.nn.Module()
    model.encoder = torch.nn.Linear(2, 2)
    model.head = torch.nn.Module()
    model.head.scorer = torch.nn.Module()
    model.head.scorer.W = torch.nn.Parameter(torch.zeros(2, 2))
    model.head.proj = torch.nn.Linear(2, 2)
    return model


def test_head_lr_exclude_trains_matching_head_params_at_lr():
    model = _toy_model()
    opt = build_optimizer(
        model, lr=1e-4, head_lr=1e-3, weight_decay=0.01, head_lr_exclude=["head.scorer.*"]
    )
    rate = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    assert rate[id(model.head.scorer.W)] == 1e-4
    assert rate[id(model.head.proj.weight)] == rate[id(model.head.proj.bias)] == 1e-3
    assert rate[id(model.encoder.weight)] == 1e-4
    # the layout older checkpoints were saved with (their optimizer state loads by position):
    # encoder decayed, encoder not decayed, head decayed, head not decayed
    plain = build_optimizer(model, lr=1e-4, head_lr=1e-3, weight_decay=0.01)
    layout = [(g["lr"], g["weight_decay"], len(g["params"])) for g in plain.param_groups]
    assert layout == [(1e-4, 0.01, 1), (1e-4, 0.0, 1), (1e-3, 0.01, 2), (1e-3, 0.0, 1)]
    # a pattern that matches nothing changes nothing (one grid shares it across heads)
    plain = build_optimizer(model, lr=1e-4, head_lr=1e-3, weight_decay=0.01)
    same = build_optimizer(
        model, lr=1e-4, head_lr=1e-3, weight_decay=0.01, head_lr_exclude=["head.absent"]
    )
    assert [(g["lr"], len(g["params"])) for g in plain.param_groups] == [
        (g["lr"], len(g["params"])) for g in same.param_groups
    ]


def test_param_lr_gives_matching_parameters_their_own_rate_first_glob_winning():
    model = _toy_model()
    opt = build_optimizer(
        model,
        lr=1e-4,
        head_lr=1e-3,
        weight_decay=0.01,
        head_lr_exclude=["head.scorer.W"],
        param_lr={"head.scorer.*": 0.0, "head.*": 5e-5, "encoder.bias": 2e-5},
    )
    rate = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    decay = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    assert rate[id(model.head.scorer.W)] == 0.0  # first glob, over head_lr_exclude
    assert rate[id(model.head.proj.weight)] == rate[id(model.head.proj.bias)] == 5e-5
    assert rate[id(model.encoder.bias)] == 2e-5 and rate[id(model.encoder.weight)] == 1e-4
    assert decay[id(model.head.proj.weight)] == 0.01 and decay[id(model.head.proj.bias)] == 0.0
    # standard groups first, in their old order; then the overrides by glob, then decay
    layout = [(g["lr"], g["weight_decay"], len(g["params"])) for g in opt.param_groups]
    assert layout == [(1e-4, 0.01, 1), (0.0, 0.01, 1), (5e-5, 0.01, 1), (5e-5, 0.0, 1)] + [
        (2e-5, 0.0, 1)
    ]
    # rate 0 freezes: AdamW's decoupled decay is scaled by the rate too
    model.head.scorer.W.grad = torch.ones(2, 2)
    opt.step()
    assert torch.equal(model.head.scorer.W.detach(), torch.zeros(2, 2))


def test_param_lr_reads_from_yaml_mappings_and_command_line_pairs(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  param_lr:\n    head.scorer.W: 1.0e-5\n")
    assert load_config(path).train.param_lr == {"head.scorer.W": 1e-5}
    cfg = load_config(None, ["train.param_lr=head.scorer.W:3e-6,encoder.*:0"])
    assert cfg.train.param_lr == {"head.scorer.W": 3e-6, "encoder.*": 0.0}
    with pytest.raises(ConfigError, match=r"train.param_lr.head.scorer.W: expected float"):
        load_config(None, ["train.param_lr=head.scorer.W:fast"])
    with pytest.raises(ConfigError, match="expected key:value"):
        load_config(None, ["train.param_lr=head.scorer.W"])
    with pytest.raises(ConfigError, match="expected a mapping"):
        config_from_dict({"train": {"param_lr": [1e-5]}})


def test_param_lr_exists_in_every_training_config():
    from structqa.experiments.spec import MAPPING_KEYS
    from structqa.ncbert.config import DropConfig
    from structqa.pretrain.config import PretrainConfig

    for cls in (Config, DropConfig, PretrainConfig):
        cfg = config_from_dict(
            {"train": {"param_lr": {"encoder.layers.*.sublayers.1.*": 1e-4}}}, cls=cls
        )
        assert cfg.train.param_lr == {"encoder.layers.*.sublayers.1.*": 1e-4}, cls
    assert MAPPING_KEYS == {"train.param_lr"}


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("train.bf16=maybe", "train.bf16 must be auto, on or off"),
        ("data.train_size=lots", "data.train_size: train size must be a positive integer"),
        ("train.batch_size=0", "train.batch_size must be >= 1"),
        ("train.grad_accum=0", "train.grad_accum must be >= 1"),
        ("train.epochs=0", "train.epochs must be > 0"),
        ("train.warmup_ratio=1.5", "train.warmup_ratio must be in [0, 1]"),
        ("decode.max_answer_length=0", "decode.max_answer_length must be >= 1"),
        (
            "model.block=[sa, nna, ffn]",
            "model.block ['sa', 'nna', 'ffn']: unknown sub-layer(s) ['nna']",
        ),
        ("model.block=[]", "model.block []: no sub-layers"),
    ],
)
def test_validate_rejects_values_before_anything_loads(override, needle):
    from structqa.config import validate

    cfg = load_config(overrides=[override])
    with pytest.raises(ConfigError, match=re.escape(needle)):
        validate(cfg)


def test_validate_accepts_the_defaults_and_max_steps_without_epochs():
    from structqa.config import validate

    validate(load_config())
    validate(load_config(overrides=["train.epochs=0", "train.max_steps=5", "train.bf16=false"]))


def test_config_changes_lists_what_differs():
    from structqa.config import config_changes

    a = load_config(overrides=["train.seed=1", "model.block=[sa, naa, ffn]"]).to_dict()
    b = load_config(overrides=["train.seed=2", "train.output_dir=x"]).to_dict()
    b["train"]["new_setting"] = 3  # a key only one side has is not compared
    assert config_changes(a, b, frozenset({"train.output_dir"})) == [
        ("model.block", ["sa", "naa", "ffn"], None),
        ("train.seed", 1, 2),
    ]


def test_yaml_syntax_error_names_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  epochs: [1\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_config(bad)


def test_stride_that_the_tokenizer_cannot_use_is_refused_up_front():
    from structqa.config import validate

    # 160 - 64 - 3 = 93 passage tokens with the longest question: a stride of 128 would
    # crash the tokenizer on the first long question, deep in featurization
    with pytest.raises(ConfigError, match=r"data\.doc_stride \(128\) must be below .* = 93"):
        validate(load_config(overrides=["data.max_seq_len=160"]))
    validate(load_config(overrides=["data.max_seq_len=160", "data.doc_stride=64"]))


def test_choice_settings_are_the_names_their_registries_build() -> None:
    """The Literal choices of the config are exactly what the code behind them accepts."""
    import typing

    from structqa.attention.query_masks import PAIR_MASKS
    from structqa.config import HeadName, JointMode, NullHead, QueryMask
    from structqa.heads import HEADS
    from structqa.heads.answerability import NULL_SOURCES
    from structqa.heads.joint import JOINT_MODES

    def names(tp):
        return set(typing.get_args(tp))

    assert names(HeadName) == set(HEADS)
    assert names(QueryMask) == set(PAIR_MASKS) | {"full"}  # full: DyReF's queries see all
    assert names(JointMode) == set(JOINT_MODES)
    assert names(NullHead) == {"span", *NULL_SOURCES}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.head=dyrx", "did you mean 'dyrex'"),
        ("model.query_mask=casual", "did you mean 'causal'"),
        ("model.null_head=classifier", "is not one of span | cls | queries"),
    ],
)
def test_a_choice_outside_its_names_fails_when_the_config_is_read(override, message) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["model.head=dyrex", "model.query_mask=full"],
            "model.query_mask 'full': model.head 'dyrex' takes bidirectional | causal | "
            "independent; 'full' is for dyref, dyref+joint",
        ),
        (
            ["model.head=dyrex+joint", "model.query_mask=full"],
            "model.head 'dyrex+joint' takes bidirectional | causal | independent",
        ),
        (["model.head=dyrex", "model.dyrex_layers=-1"], "model.dyrex_layers must be >= 1, got -1"),
        (["model.dyrex_layers=0"], "model.dyrex_layers must be >= 1, got 0"),
    ],
)
def test_head_settings_the_model_cannot_build_fail_before_it_is_built(overrides, message):
    from structqa.config import validate

    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(load_config(None, overrides))
    validate(load_config(None, ["model.head=dyref", "model.query_mask=full"]))
    validate(load_config(None, ["model.head=independent", "model.query_mask=full"]))  # unused


def test_the_query_masks_a_config_accepts_are_the_ones_each_head_builds():
    import typing

    from structqa.config import QueryMask, query_masks
    from structqa.heads import HEADS, build_head

    for head in HEADS:
        for mask in typing.get_args(QueryMask):
            try:
                build_head(head, 8, num_heads=2, query_mask=mask, dyrex_layers=1)
                built = True
            except ValueError:
                built = False
            accepted = not query_masks(head) or mask in query_masks(head)
            assert built == accepted, (head, mask)


@pytest.mark.parametrize("command", ["train", "drop-train", "pretrain"])
def test_an_experiment_grid_given_to_a_training_command_says_to_run_experiment(
    tmp_path, capsys, command
):
    from structqa.cli import main

    grid = tmp_path / "grid.yaml"
    grid.write_text("name: g\nbase: {train: {lr: 1.0e-4}}\ngrid: {train.seed: [0, 1]}\n")
    assert main([command, str(grid)]) == 2
    err = capsys.readouterr().err
    assert (
        f"{grid} is an experiment grid (it has name, base, grid), not the config of one run: "
        f"run `structqa experiment {grid}`"
    ) in err
    assert "did you mean" not in err
