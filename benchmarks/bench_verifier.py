"""What the answerability verifier costs at answering time: seconds per question for the model
alone, with the lexical verifier and with the similarity verifier (one more pass of the
default encoder over the passage's sentences and the question), on the same questions.

The verifiers are fitted here on the checkpoint's saved answers to its validation slice
(best/nbest_predictions.json and null_odds.json), as ``structqa calibrate`` fits them; then
each arm answers the first ``--questions`` questions of that slice, ``--batch`` at a time, as
``Predictor.predict_examples`` does for ``predict`` and the service. The sentence encoder's
cache is emptied before every call, so every passage costs what a new one would; the arm
"similarity, passage seen" keeps the passages' sentences (a user asking several questions
about one document) and embeds only the question. Arms
alternate round after round (harness.alternate); the medians and their ratios to the model
alone are printed and written as JSON.

    python benchmarks/bench_verifier.py "runs/squad2-transfer/variant=negatives,seed=0/best" \\
        --on "runs/squad2-transfer/_validation/squad2-train-val0.2-seed1234/val.json"
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from harness import Provenance, alternate, median, ratio, timing

from structqa.calibration.report import calibrate, predictions_from_files
from structqa.calibration.similarity import DEFAULT, sentence_encoder
from structqa.data.readers import read_extractive
from structqa.prediction.predictor import Predictor


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", type=Path, help="a SQuAD 2.0 checkpoint's best/")
    p.add_argument("--on", type=Path, required=True, help="the validation file it chose best/ on")
    p.add_argument("--questions", type=int, default=64)
    p.add_argument("--batch", type=int, default=1, help="questions per call (1: one request)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    prov = Provenance.start(args, torch.device("cpu"))

    val = list(read_extractive(args.on).examples)
    saved = predictions_from_files(args.checkpoint)
    calibrations = {k: calibrate(val, saved, True, verifier=k) for k in ("lexical", "similarity")}
    predictor = Predictor.from_checkpoint(args.checkpoint)
    encoder = sentence_encoder(DEFAULT)
    questions = val[: args.questions]
    batches = [questions[i : i + args.batch] for i in range(0, len(questions), args.batch)]

    def arm(kind: str | None, passage_seen: bool = False):
        def answer_all() -> None:
            for batch in batches:
                if passage_seen:  # the passage's sentences embedded already, the question not
                    for ex in batch:
                        encoder.cache.pop(ex.question, None)
                else:
                    encoder.cache.clear()
                predictions = predictor.predict_examples(batch, verify=False)
                if kind is not None:
                    calibrations[kind].verify(batch, predictions)

        return timing(answer_all)

    arms = {
        "model alone": arm(None),
        "lexical": arm("lexical"),
        "similarity": arm("similarity"),
        "similarity, passage seen": arm("similarity", passage_seen=True),
    }
    samples = alternate(arms, args.rounds, warm_round=True)
    per_question = {k: median(v) / len(questions) for k, v in samples.items()}
    base = per_question["model alone"]
    for k, s in per_question.items():
        print(f"{k:26s} {1000 * s:8.2f} ms/question   {ratio(s, base)} of the model alone")
    path = prov.write_stamped(
        args.out,
        "verifier-cost",
        seconds_per_question=per_question,
        samples=samples,
        ratio_to_model={k: s / base for k, s in per_question.items()},
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
