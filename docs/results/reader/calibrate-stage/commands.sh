#!/usr/bin/env bash
# The commands behind the calibrate stage's results on this page (2026-11-30; AMD EPYC Zen 3, 2 cores,
# AVX2 only, torch 2.13.0+cpu fp32, onnxruntime int8) from the repository root. The two builds
# had finished before the stage existed; READER1/READER2 are their folders.
set -euo pipefail
READER1=${READER1:-/work/reader-seed1}
READER2=${READER2:-/work/reader-seed2}
DATA=../shared/data
OUT=docs/results/reader/calibrate-stage

# the builds, run again: the calibrate stage, then the held-out stage scored again (commit 83761cf)
structqa reader build --seed 2 --out "$READER2" --no-progress
structqa reader build --seed 1 --out "$READER1" --no-progress

# against the slice calibration each build had before (its held-out answers, kept aside as
# READER-before/heldout), paired bootstrap over the 2,672 SQuAD 2.0 held-out questions
for s in 1 2; do
  R=$([ "$s" = 1 ] && echo "$READER1" || echo "$READER2")
  structqa compare "$DATA/splits/squad2-heldout.v2.0.json" \
    --a "$R/heldout/reader/squad2-torch/predictions.json" \
    --b "$R-before/heldout/reader/squad2-torch/predictions.json" \
    --json "$OUT/start-$s-squad2-vs-slice-calibration.json"
done
structqa compare "$DATA/splits/squad2-heldout.v2.0.json" \
  --a "$READER1/heldout/reader/squad2-torch/predictions.json" "$READER2/heldout/reader/squad2-torch/predictions.json" \
  --b "$READER1-before/heldout/reader/squad2-torch/predictions.json" "$READER2-before/heldout/reader/squad2-torch/predictions.json" \
  --json "$OUT/starts-1-2-squad2-vs-slice-calibration.json"

# how held-out F1 follows the share (reports, chooses nothing)
python scripts/share_sensitivity.py "$READER2/run/best" --on "$READER2/run/validation-human.v2.json" \
  --heldout "$DATA/splits/squad2-heldout.v2.0.json" --scored "$READER2/heldout/reader/squad2-torch" \
  --out "$OUT/sensitivity-start-2.json"

# over a collection: BEFORE is a copy of READER2/run/best with its slice calibration saved back
# (structqa.calibration.report.save_calibration), LOW a copy refitted at share 0.1
cp -r "$READER2/run/best" LOW
structqa calibrate LOW --on "$READER2/run/validation-human.v2.json" --unanswerable-share 0.1
structqa index "$DATA/squad/squad-v1.1-dev.mrqa.jsonl.gz" --out IDX
python scripts/ask_abstention.py IDX --eval "$DATA/splits/squad1-heldout.mrqa.jsonl.gz" --questions 400 \
  --checkpoint before=BEFORE --checkpoint human-share="$READER2/run/best" --checkpoint share-0.1=LOW \
  --out "$OUT/ask-abstention-start-2.json"
python scripts/ask_abstention.py IDX --eval "$DATA/splits/squad2-heldout.v2.0.json" --questions 400 --spread \
  --checkpoint before=BEFORE --checkpoint human-share="$READER2/run/best" --checkpoint share-0.1=LOW \
  --out "$OUT/ask-abstention-start-2-squad2.json"
