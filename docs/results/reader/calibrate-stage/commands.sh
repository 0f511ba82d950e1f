#!/usr/bin/env bash
# The commands behind the calibrate stage's results on this page (2026-11-30; AMD EPYC Zen 3, 2 cores,
# AVX2 only, torch 2.13.0+cpu fp32, onnxruntime int8) from the repository root. The two builds
# had finished before the stage existed; READER1/READER2 are their folders.
set -euo pipefail
READER1=${READER1:-/work/reader-seed1}
READER2=${READER2:-/work/reader-seed2}
DATA=../shared/data
OUT=docs/results/reader/calibrate-stage

# before running the builds again, keep what the slice calibration gave: the held-out answers,
# the stage records, the card and the calibration (READER-before)
for R in "$READER1" "$READER2"; do
  mkdir -p "$R-before"
  cp -r "$R/heldout" "$R/stages" "$R/card.json" "$R/MODEL_CARD.md" "$R-before/"
  cp "$R/run/best/calibration.json" "$R-before/"
done

# the builds, run again: the calibrate stage, then the held-out stage scored again (commit 83761cf)
structqa reader build --seed 2 --out "$READER2" --no-progress
structqa reader build --seed 1 --out "$READER1" --no-progress

# the fit at a later commit is the same (start-S/refit-at-a-later-commit.json compares the
# stage's calibration with a copy's, refitted at the commit the file names)
for s in 1 2; do
  R=$([ "$s" = 1 ] && echo "$READER1" || echo "$READER2")
  rm -rf "REFIT$s" && cp -r "$R/run/best" "REFIT$s" && rm -rf "REFIT$s/onnx"
  structqa calibrate "REFIT$s" --on "$R/run/validation-human.v2.json" \
    --unanswerable-share "$(python -c "import json; print(json.load(open('$R/stages/calibrate.json'))['unanswerable_share'])")"
  python scripts/compare_calibrations.py "$R/run/best/calibration.json" "REFIT$s/calibration.json" \
    --out "$OUT/start-$s/refit-at-a-later-commit.json"
done

# against the slice calibration each build had before (READER-before/heldout), paired
# bootstrap over the 2,672 SQuAD 2.0 held-out questions
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

# over a collection: BEFORE is a copy of READER2/run/best with its slice calibration saved back,
# LOW a copy refitted at share 0.1
cp -r "$READER2/run/best" BEFORE
python -c "
from structqa.calibration.report import load_calibration, save_calibration
save_calibration('BEFORE', load_calibration('$READER2-before'))"
cp -r "$READER2/run/best" LOW
structqa calibrate LOW --on "$READER2/run/validation-human.v2.json" --unanswerable-share 0.1
structqa index "$DATA/squad/squad-v1.1-dev.mrqa.jsonl.gz" --out IDX
# (the SQuAD 1.1 rows were taken by two runs of the script, the share-0.1 row after the other
# two, and merged: the file records both commands; each row is its checkpoint's alone)
python scripts/ask_abstention.py IDX --eval "$DATA/splits/squad1-heldout.mrqa.jsonl.gz" --questions 400 \
  --checkpoint before=BEFORE --checkpoint human-share="$READER2/run/best" --checkpoint share-0.1=LOW \
  --out "$OUT/ask-abstention-start-2.json"
python scripts/ask_abstention.py IDX --eval "$DATA/splits/squad2-heldout.v2.0.json" --questions 400 --spread \
  --checkpoint before=BEFORE --checkpoint human-share="$READER2/run/best" --checkpoint share-0.1=LOW \
  --out "$OUT/ask-abstention-start-2-squad2.json"

# start 0, rebuilt with the stage part of the build (2026-11-30, a 2-core Intel Xeon with AMX,
# bf16 training; stopped and resumed by running it again), then its files copied here
READER0=${READER0:-/work/reader-seed0}
structqa reader build --seed 0 --out "$READER0" --no-progress
mkdir -p "$OUT/start-0"
cp "$READER0/stages/calibrate.json" "$OUT/start-0/stage-calibrate.json"
cp "$READER0/stages/heldout.json" "$OUT/start-0/stage-heldout.json"
cp "$READER0/MODEL_CARD.md" "$OUT/start-0/"
for n in squad2-torch squad2-onnx-int8; do cp "$READER0/heldout/reader/$n/metrics.json" "$OUT/start-0/$n.metrics.json"; done
gzip -c "$READER0/heldout/reader/squad2-torch/predictions.json" > "$OUT/start-0/squad2-torch.predictions.json.gz"

# start 3, the same recipe at seed 3 (2026-11-30, the same Xeon with AMX, bf16 training;
# stopped twice and resumed by running it again), then its files copied here
READER3=${READER3:-/work/reader-seed3}
nice -n 19 structqa reader build --seed 3 --out "$READER3" --no-progress
mkdir -p "$OUT/start-3"
cp "$READER3/stages/calibrate.json" "$OUT/start-3/stage-calibrate.json"
cp "$READER3/stages/heldout.json" "$OUT/start-3/stage-heldout.json"
cp "$READER3/MODEL_CARD.md" "$OUT/start-3/"
for n in squad2-torch squad2-onnx-int8; do cp "$READER3/heldout/reader/$n/metrics.json" "$OUT/start-3/$n.metrics.json"; done
for n in squad1-torch squad2-torch; do
  cp "$READER3/heldout/reader/$n/reliability.json" "$OUT/start-3/$n.reliability.json"
  cp "$READER3/heldout/reader/$n/reliability.png" "$OUT/start-3/$n.reliability.png"
done
gzip -c "$READER3/heldout/reader/squad2-torch/predictions.json" > "$OUT/start-3/squad2-torch.predictions.json.gz"
