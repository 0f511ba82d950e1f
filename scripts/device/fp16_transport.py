"""Checkpoints to a lent GPU machine at half the bytes: a call carries at most 64 MiB, and a
MiniLM checkpoint's fp32 weights are 90-120 MB that compression hardly shrinks.

``pack`` writes one tar.xz of checkpoint directories (and installed packages, under
``site/``) with every float32 tensor of their ``model.safetensors`` stored as float16, and a
``fp16-transport.json`` listing what was halved. ``unpack`` (on the GPU machine) extracts it,
turns those tensors back into float32 and re-seals each checkpoint's manifest, so that the
runs there load the same files as here, with weights rounded to float16 (a relative change
under 5e-4, far below what fine-tuning moves them; say so beside any result made from them).

    python scripts/device/fp16_transport.py pack OUT.tar.xz DIR... [--site PKG_DIR...]
    python3 scripts/device/fp16_transport.py unpack OUT.tar.xz --work W --site /tmp/site
"""

from __future__ import annotations

import argparse
import io
import json
import lzma
import sys
import tarfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save, save_file

LISTING = "fp16-transport.json"
WEIGHTS = "model.safetensors"
# what a run started from the checkpoint does not read
SKIPPED = {"onnx", "eval", "nbest_predictions.json", "predictions.json"}


def _half_if_faithful(tensor: torch.Tensor) -> torch.Tensor:
    """float16 unless that moves a value by more than 1e-3 of the tensor's largest (a tensor of
    values under float16's range, such as a key bias the softmax ignores, stays float32)."""
    if tensor.dtype != torch.float32 or tensor.numel() == 0:
        return tensor
    half = tensor.to(torch.float16)
    scale = tensor.abs().max()
    if not torch.isfinite(half).all() or (half.float() - tensor).abs().max() > 1e-3 * scale:
        return tensor
    return half


def _halved(path: Path) -> bytes:
    return save({k: _half_if_faithful(v).contiguous() for k, v in load_file(str(path)).items()})


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def pack(out: Path, dirs: list[Path], site: list[Path]) -> None:
    missing = [str(p) for p in [*dirs, *site] if not p.exists()]
    if missing:
        raise SystemExit(f"nothing to pack at: {', '.join(missing)}")
    halved: list[str] = []
    with lzma.open(out, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        roots = [(d, d) for d in dirs]
        roots += [(d, Path("site") / d.name) for d in site]
        for source, arcroot in roots:
            paths = sorted(source.rglob("*")) if source.is_dir() else [source]
            for path in paths:
                rel = path.relative_to(source) if source.is_dir() else Path()
                if not path.is_file() or SKIPPED.intersection(rel.parts):
                    continue
                if "__pycache__" in rel.parts:
                    continue
                name = (arcroot / rel).as_posix()
                if path.name == WEIGHTS:
                    _add_bytes(tar, name, _halved(path))
                    halved.append(name)
                else:
                    tar.add(path, arcname=name)
        _add_bytes(tar, LISTING, json.dumps({"halved": halved}, indent=1).encode())
    print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB, {len(halved)} weight files halved")


def unpack(archive: Path, work: Path, site: Path) -> None:
    from structqa.manifest import MANIFEST, write_manifest

    with tarfile.open(archive, mode="r:xz") as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            target = site / Path(*parts[1:]) if parts[0] == "site" else work / member.name
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            if source is not None:
                target.write_bytes(source.read())
    listing = json.loads((work / LISTING).read_text())
    for name in listing["halved"]:
        parts = Path(name).parts
        path = site / Path(*parts[1:]) if parts[0] == "site" else work / name
        tensors = load_file(str(path))
        save_file(
            {k: v.float() if v.dtype == torch.float16 else v for k, v in tensors.items()}, str(path)
        )
        if (path.parent / MANIFEST).is_file():
            write_manifest(path.parent)
        print("restored float32:", path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="stage", required=True)
    p = sub.add_parser("pack")
    p.add_argument("out", type=Path)
    p.add_argument("dirs", type=Path, nargs="+")
    p.add_argument("--site", type=Path, nargs="*", default=[])
    u = sub.add_parser("unpack")
    u.add_argument("archive", type=Path)
    u.add_argument("--work", type=Path, required=True)
    u.add_argument("--site", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.stage == "pack":
        pack(args.out, args.dirs, args.site)
    else:
        unpack(args.archive, args.work, args.site)
    return 0


if __name__ == "__main__":
    sys.exit(main())
