#!/usr/bin/env bash
# The commands behind "Chosen and calibrated on held-out articles" (2026-11-30/12-01; the 2-core Intel
# Xeon with AVX512-BF16 and AMX, torch 2.13.0+cpu, bf16 training) from the repository root.
set -euo pipefail
OUT=docs/results/reader/article-slice

# the build that holds out whole articles (started at e8d2044, where it was the default, so
# without --slice; stopped with SIGTERM after its first run; since --slice exists the variant is
# --slice articles, and the same folder goes on with it: resumable)
nice -n 19 structqa reader build --seed 0 --slice articles --out /work/reader-art-seed0 --no-progress
cp /work/reader-art-seed0/stages/data.json "$OUT/stage-data-start-0.json"

# run 0 of each recipe, calibrated as the calibrate stage calibrates the reader, scored on
# SQuAD 2.0 held-out (the former recipe's run 0: the build of seed 0 in /work/reader-seed0)
python scripts/run_heldout.py /work/reader-seed0/members/m0 --out /work/diag/former-m0
cp /work/diag/former-m0/summary.json "$OUT/run-0-former-recipe.json"
python scripts/run_heldout.py /work/reader-art-seed0/members/m0 --out /work/diag/article-m0
cp /work/diag/article-m0/summary.json "$OUT/run-0-article-slice.json"
