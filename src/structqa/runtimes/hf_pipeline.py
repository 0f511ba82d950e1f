"""Answers of ``transformers.pipeline("question-answering")`` for a transformers export.

transformers 5 removed that pipeline, so it runs in a subprocess whose ``PYTHONPATH`` starts
with ``hf4_path``: a ``pip install --target`` directory of transformers 4.x, the
huggingface_hub and the tokenizers it pins (``.ci/run`` makes one, ``$STRUCTQA_HF4_PATH``).
Used to check that an export answers as structqa does (tests/runtimes, benchmarks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from structqa.data.records import Example

_SCRIPT = """
import json, sys
import transformers
from transformers import pipeline
job = json.load(open(sys.argv[1]))
qa = pipeline("question-answering", model=job["model"], device=-1)
out = {}
for ex in job["examples"]:
    a = qa(question=ex["question"], context=ex["context"], top_k=1, align_to_words=False,
           handle_impossible_answer=False, **job["settings"])
    out[ex["id"]] = [a["answer"], a["start"], a["end"]]
json.dump({"transformers": transformers.__version__, "answers": out}, open(sys.argv[2], "w"))
"""


def pipeline_settings(config: Any) -> dict[str, int]:
    """The pipeline arguments that window and bound answers as ``config`` (a structqa
    :class:`~structqa.config.Config`) does."""
    d = config.data
    return {
        "max_answer_len": config.decode.max_answer_length,
        "max_seq_len": d.max_seq_len,
        "doc_stride": d.doc_stride,
        "max_question_len": d.max_query_len,
    }


def hf4_path() -> str | None:
    """Where transformers 4.x is (``""``: the installed one is 4.x; None: nowhere)."""
    import transformers

    if transformers.__version__.startswith("4."):
        return ""
    extra = os.environ.get("STRUCTQA_HF4_PATH")
    if extra and (Path(extra) / "transformers").is_dir():
        return extra
    return None


def pipeline_answers(
    model_dir: str | Path,
    examples: Sequence[Example],
    settings: dict[str, int],
    path: str,
    timeout: float = 1800,
) -> tuple[str, dict[str, tuple[str, int, int]]]:
    """(transformers version, {id: (text, start char, end char)}) from the pipeline with
    ``settings`` (max_answer_len, max_seq_len, doc_stride, max_question_len), answers not
    widened to words and never empty."""
    job = {
        "model": str(model_dir),
        "settings": settings,
        "examples": [{"id": e.id, "question": e.question, "context": e.context} for e in examples],
    }
    with tempfile.TemporaryDirectory() as tmp:
        script, job_file, out = (Path(tmp) / n for n in ("qa.py", "job.json", "out.json"))
        script.write_text(_SCRIPT)
        job_file.write_text(json.dumps(job))
        env = dict(os.environ)
        if path:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH")) if p)
        run = subprocess.run(
            [sys.executable, str(script), str(job_file), str(out)],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        if run.returncode:
            raise RuntimeError(f"the question-answering pipeline failed: {run.stderr[-2000:]}")
        result = json.loads(out.read_text())
    return result["transformers"], {k: tuple(v) for k, v in result["answers"].items()}
