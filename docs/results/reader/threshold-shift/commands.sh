#!/usr/bin/env bash
# Where the slice-fitted threshold's shift comes from (2026-12-01, the 2-core Intel Xeon with
# AVX512-BF16 and AMX, torch 2.13.0+cpu). The two builds trained in bf16 on this machine.
set -euo pipefail
# answer quality and answerability ranking on the slice the stage calibrates on (the build's
# reader as built, bf16; commit 11587e9): 17 s and 39 s wall, peak RSS 1.2 GB (/usr/bin/time)
for s in 0 3; do
  structqa evaluate /work/reader-seed$s/run/best --eval /work/reader-seed$s/run/validation-human.v2.json \
    --out /work/shift/seed$s-slice --no-progress
  cp /work/shift/seed$s-slice/metrics.json start-$s-slice.metrics.json
done
# start 0's reader calibrated and scored on SQuAD 2.0 held-out in fp32 (auto resolves to fp32
# when bf16 is said not to pay), the precision check: commit 0b9a000, 1 min 33 s wall
STRUCTQA_BF16_SPEEDUP=0.5 python scripts/run_heldout.py /work/reader-seed0/run --out /work/fp32chk/seed0
cp /work/fp32chk/seed0/summary.json start-0-heldout-fp32.summary.json
