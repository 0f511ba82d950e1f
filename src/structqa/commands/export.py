"""`structqa export`: a checkpoint as an ONNX graph (fp32, int8) or a transformers directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from structqa.commands.common import command
from structqa.runtimes.select import DEFAULT_EXPORT_DIR

_EXPORT_TEXT = """export a checkpoint for deployment: ONNX (fp32, int8) or transformers

Writes a checkpoint as an ONNX graph (encoder + span head, dynamic batch and length axes, with
the tokenizer and decoding settings) that `structqa evaluate | predict | serve` and
Predictor.from_checkpoint run on onnxruntime, or, for Independent heads on a BERT encoder, as a
transformers BertForQuestionAnswering directory.
"""


def add_parser(subparsers) -> None:
    p = command(subparsers, "export", _EXPORT_TEXT)
    p.add_argument("checkpoint", help="a training checkpoint directory (e.g. runs/x/best)")
    p.add_argument(
        "--format",
        choices=["onnx", "transformers"],
        default="onnx",
        help="onnx (default): one graph for structqa's runtimes; transformers: a "
        "BertForQuestionAnswering directory (Independent head, plain BERT only)",
    )
    p.add_argument(
        "--quantize",
        choices=["int8"],
        help="also write onnxruntime's dynamic int8 graph (model.int8.onnx)",
    )
    p.add_argument(
        "--out",
        help=f"output directory (default: CHECKPOINT/{DEFAULT_EXPORT_DIR} for onnx, where "
        "--runtime auto finds it; CHECKPOINT/transformers for transformers)",
    )
    p.add_argument(
        "--rtol",
        type=float,
        default=1e-4,
        help="largest |onnx - torch| allowed on an output of the export check, as a share of "
        "the output's scale (its largest |value|)",
    )
    p.add_argument(
        "--atol",
        type=float,
        default=1e-4,
        help="the absolute floor of that allowance, for outputs of small scale",
    )
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace, extra: list[str]) -> int:
    checkpoint = Path(args.checkpoint)
    if args.format == "transformers":
        from structqa.runtimes.hf_export import export_transformers

        if args.quantize:
            raise ValueError("--quantize applies to --format onnx only")
        done = export_transformers(checkpoint, args.out or checkpoint / "transformers")
        print(f"wrote {done.directory} ({done.sizes['fp32'] / 1e6:.1f} MB, {done.seconds:.1f} s)")
        return 0
    from structqa.runtimes.onnx_export import export_onnx

    done = export_onnx(
        checkpoint,
        args.out or checkpoint / DEFAULT_EXPORT_DIR,
        args.quantize,
        atol=args.atol,
        rtol=args.rtol,
    )
    for precision, size in done.sizes.items():
        print(
            f"{precision}: {size / 1e6:.1f} MB, max |onnx - torch| "
            f"{done.max_abs_diff[precision]:.2e} on random check windows (outputs up to "
            f"{done.scale:.3g})"
        )
    print(f"wrote {done.directory} in {done.seconds:.1f} s")
    return 0
