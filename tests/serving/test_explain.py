"""POST /v1/explain draws the start/end queries' attention on every runtime: over an exported
graph, from the torch weights of the checkpoint it was exported from."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from serving_support import CONTEXT, QUESTION, client_for

from structqa.analysis import explain
from structqa.cli import main
from structqa.prediction.predictor import Predictor


@pytest.fixture(scope="module")
def dyrex_with_export(tiny_dyrex_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ckpt = tmp_path_factory.mktemp("explain-graph") / "best"
    shutil.copytree(tiny_dyrex_run, ckpt)
    assert main(["export", str(ckpt), "--quantize", "int8"]) == 0
    return ckpt


def _maps(body: dict) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(body["start_weights"]), np.asarray(body["end_weights"])


def test_a_graph_server_explains_with_its_checkpoints_weights(dyrex_with_export: Path) -> None:
    graph = Predictor.from_checkpoint(dyrex_with_export, runtime="onnx-int8")
    assert graph.runtime == "onnx-int8"
    torch_side = Predictor.from_checkpoint(dyrex_with_export, runtime="torch", bf16="off")
    expected = explain(
        torch_side.model, torch_side.tokenizer, torch_side.config, QUESTION, CONTEXT
    ).to_dict()
    with client_for(graph) as client:
        ready = client.get("/ready").json()
        assert ready["explain"] == "dyrex"
        assert graph._attention_model is None  # known from the config; loaded on first use
        r = client.post("/v1/explain", json={"question": QUESTION, "context": CONTEXT})
        assert r.status_code == 200, r.text
        body = r.json()
        # the answer itself still comes from the graph
        answer = client.post("/v1/answer", json={"question": QUESTION, "context": CONTEXT})
        assert answer.json()["answer"] == graph.predict(QUESTION, CONTEXT).text
    assert graph._attention_model is not None
    assert body["tokens"] == expected["tokens"]
    start, end = _maps(body)
    assert start.shape == np.asarray(expected["start_weights"]).shape
    np.testing.assert_allclose(start, expected["start_weights"], atol=1e-5)
    np.testing.assert_allclose(end, expected["end_weights"], atol=1e-5)
    assert len(start) == len(body["tokens"])


def test_an_export_directory_alone_has_no_attention_to_show(dyrex_with_export: Path) -> None:
    """Without the torch weights the reply says so and what to serve instead; it once said
    that the DyREx head, which draws maps, had none."""
    graph = Predictor.from_checkpoint(dyrex_with_export / "onnx", runtime="onnx-int8")
    assert graph.attention_model() is None and graph.attention_head() is None
    with client_for(graph) as client:
        assert client.get("/ready").json()["explain"] is None
        r = client.post("/v1/explain", json={"question": QUESTION, "context": CONTEXT})
        assert r.status_code == 404
        error = r.json()["error"]
        assert "need the torch weights" in error and "serve the checkpoint it was" in error
        assert str(dyrex_with_export.resolve()) in error or str(dyrex_with_export) in error
        assert "no attention map for the dyrex head" not in error


def test_the_head_kind_is_read_without_loading_weights(dyrex_with_export: Path) -> None:
    """An exported graph's server learns its head from the checkpoint's config, on the meta
    device: no tensor holds memory."""
    graph = Predictor.from_checkpoint(dyrex_with_export, runtime="onnx-int8")
    head = graph.attention_head()
    assert type(head.queries).__name__ == "DyRExQueries"
    assert all(p.is_meta for p in head.parameters())
    torch_side = Predictor.from_checkpoint(dyrex_with_export, runtime="torch", bf16="off")
    assert torch_side.attention_head() is torch_side.model.head


def test_a_question_too_long_to_read_is_refused_not_cut(tiny_dyrex_run: Path) -> None:
    """/v1/answer refuses a question over data.max_query_len tokens; /v1/explain once cut it
    and drew the map of another question."""
    predictor = Predictor.from_checkpoint(tiny_dyrex_run, runtime="torch", bf16="off")
    words = " ".join(["which"] * (predictor.features.max_query_len + 40)) + "?"
    with client_for(predictor) as client:
        for path in ("/v1/answer", "/v1/explain"):
            r = client.post(path, json={"question": words, "context": CONTEXT})
            assert r.status_code == 422, (path, r.text)
            assert r.json()["fields"][0]["field"] == "question"
        r = client.post("/v1/answer", json=[{"question": words, "context": CONTEXT}])
        assert r.json()["fields"][0]["field"] == "[0].question"  # a list of one: as pydantic
        r = client.post("/predict", json={"pairs": [{"question": words, "context": CONTEXT}]})
        assert r.json()["fields"][0]["field"] == "pairs[0].question"
