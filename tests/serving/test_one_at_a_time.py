"""`serve --one-at-a-time`: each request is processed whole before the next one starts (the
baseline of the load benchmark), through the same HTTP edge."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from serving_support import CONTEXT, client_for

from structqa.prediction.predictor import Answer, Predictor

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see tests/conftest.py


class Recording(Predictor):
    """The tiny predictor, noting when each request's whole prediction starts and ends. The
    first request holds the worker until the second is admitted and then waits a little for
    the second to start: a server that overlapped requests would start it meanwhile."""

    def __init__(self, base: Predictor):
        super().__init__(base.model, base.tokenizer, base.config, bf16="off")
        self.events: list[tuple[str, str]] = []
        self.second_admitted = threading.Event()
        self.second_started = threading.Event()

    def predict_batch(self, pairs: Sequence[tuple[str, str]]) -> list[Answer]:
        question = pairs[0][0]
        self.events.append(("start", question))
        if question == "Who won first?":
            assert self.second_admitted.wait(60)
            self.second_started.wait(0.5)
        else:
            self.second_started.set()
        answers = super().predict_batch(pairs)
        self.events.append(("end", question))
        return answers


def _wait(cond, what: str) -> None:
    for _ in range(3000):
        if cond():
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"gave up waiting for {what}")


def test_two_concurrent_requests_run_one_after_the_other(tiny_predictor):
    recording = Recording(tiny_predictor)
    with client_for(recording, one_at_a_time=True) as client:
        service = client.app.state.service
        replies: dict[str, dict] = {}

        def ask(question: str) -> None:
            r = client.post("/v1/answer", json={"question": question, "context": CONTEXT})
            assert r.status_code == 200, r.text
            replies[question] = r.json()

        first = threading.Thread(target=ask, args=("Who won first?",))
        first.start()
        _wait(lambda: ("start", "Who won first?") in recording.events, "the first request")
        second = threading.Thread(target=ask, args=("Who won second?",))
        second.start()
        _wait(lambda: service.admitted == 2, "the second request's admission")
        recording.second_admitted.set()
        first.join(60)
        second.join(60)
    assert recording.events == [
        ("start", "Who won first?"),
        ("end", "Who won first?"),
        ("start", "Who won second?"),
        ("end", "Who won second?"),
    ]
    for reply in replies.values():  # answered as the Predictor answers
        assert CONTEXT[reply["start"] : reply["end"]] == reply["answer"] or reply["no_answer"]
    assert len(replies) == 2


def test_the_default_server_does_not_take_the_one_at_a_time_path(tiny_predictor):
    recording = Recording(tiny_predictor)
    with client_for(recording) as client:
        r = client.post("/v1/answer", json={"question": "Who won?", "context": CONTEXT})
        assert r.status_code == 200, r.text
    assert recording.events == []
