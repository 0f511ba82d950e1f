#!/bin/bash
# run from the repository root after `structqa reader build --seed 2 --out /work/reader-seed2` finished: copy its results, compare its soup
set -e
B=/work/reader-seed2
D=docs/results/reader/seed-2/soup
mkdir -p $D
H=../shared/data/splits/squad1-heldout.mrqa.jsonl.gz
cp $B/MODEL_CARD.md $B/card.json $D/
cp $B/run/best/soup.json $D/soup.json
cp $B/stages/train.json $D/stage-train.json
cp $B/members/m1/metrics.jsonl docs/results/reader/seed-2/member-1-validation.jsonl
cp $B/stages/member-1.json docs/results/reader/seed-2/member-1.stage.json
for s in squad1-torch squad2-torch squad1-onnx-int8 squad2-onnx-int8; do cp $B/heldout/reader/$s/metrics.json $D/$s.metrics.json; done
for s in squad1-torch squad2-torch; do gzip -9n -c $B/heldout/reader/$s/predictions.json > $D/$s.predictions.json.gz; done
S2=$D/squad1-torch.predictions.json.gz
S1=docs/results/reader/seed-1/soup/squad1-torch.predictions.json.gz
S0=docs/results/reader/soup-build/squad1-torch.predictions.json.gz
M0=docs/results/reader/seed-2/member-0-squad1-torch.predictions.json.gz
GP=$(for s in 0 1 2 3 4; do printf 'docs/results/reader-screen-gpu/answers/variant=baseline,seed=%s.json.gz ' $s; done)
GR=$(for s in 0 1 2 3 4; do printf 'docs/results/reader-screen-gpu/answers/variant=sa-sa-ft,seed=%s.json.gz ' $s; done)
CP=$(for s in 0 1 2; do printf 'docs/results/reader-soup-cpu/answers/variant=baseline,seed=%s.json.gz ' $s; done)
c() { out=$1; shift; echo "== $out"; structqa compare $H "$@" --json $D/$out.json | tail -3; }
c soup-vs-cpu-plain-seed2 --a $S2 --b docs/results/reader-soup-cpu/answers/variant=baseline,seed=2.json.gz
c soup-vs-cpu-plain-3-seeds --a $S2 --b $CP
c soup-vs-gpu-plain-5 --a $S2 --b $GP
c soup-vs-member-0 --a $S2 --b $M0
c soup-vs-gpu-recipe-5 --a $S2 --b $GR
c three-soups-vs-cpu-plain-seeds-0-2-paired --a $S0 $S1 $S2 --b $CP
c three-soups-vs-gpu-plain-5 --a $S0 $S1 $S2 --b $GP
