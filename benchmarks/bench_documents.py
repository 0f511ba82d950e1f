"""Document collections at scale: indexing speed, index size, and `ask` latency over HTTP.

For each size (chunks), a fresh index is built from copies of the BEIR SciFact corpus made
distinct (each copy's titles and texts carry the copy's number, so content hashing keeps every
one), and the benchmark reports:

- indexing: chunks per second (reading, chunking, BM25 and the sentence encoder's embeddings),
  and how it changes with size;
- the index on disk (bytes per chunk) and in memory: the peak RSS of a fresh process that opens
  the index and answers five searches of each retriever, minus that of one that only imports
  structqa (``memory_bytes``), and minus that of one that loads the sentence encoder and embeds
  the same queries (``index_memory_bytes``: the index's own share; ``/proc/self/status`` VmHWM);
- `ask` over HTTP (`structqa serve CKPT --index INDEX`, POST /v1/ask, 10 chunks read): latency
  p50/p99 with 1 and with 8 clients asking SciFact's test claims in a loop for ``--seconds``;
- the share of `ask` time outside the reader: retrieval vs reading timed in-process for the
  same questions (``DocumentIndex.search_many`` and ``Predictor.predict_batch``).

Time it on an idle machine. Embedding runs at about 40-50 chunks/s on 2 cores, so 100k chunks
take 35-45 minutes; build the large index once with ``--keep DIR`` and reuse it with
``--reuse``. Usage:

    python benchmarks/bench_documents.py --checkpoint runs/reader/run/best \
        --sizes 1000 10000 [--keep runs/bench-documents] [--out docs/results/documents/bench]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_serve import Record, Server, _client, _summary
from harness import Provenance, pick_device

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = "retrieval/scifact"

MEMORY_PROBE = """
import json, sys
from structqa.documents import DocumentIndex
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
QUERIES = ["vitamin D and bone density", "smoking lung cancer", "gene expression",
           "antibiotic resistance", "sleep and memory"]
if sys.argv[1] == "encoder":  # what any search process holds, whatever the index's size
    from structqa.documents.index import _encoder
    _encoder()(QUERIES)
elif sys.argv[1] != "-":
    with DocumentIndex.open(sys.argv[1]) as index:
        for retriever in ("bm25", "dense", "hybrid"):
            for q in QUERIES:
                index.search(q, 10, retriever)
print(json.dumps({"peak_bytes": hwm()}))
"""


def corpus_copies(data: Path, chunks_wanted: int, out: Path) -> int:
    """Write copies of SciFact's corpus (each made distinct) to ``out`` until they hold about
    ``chunks_wanted`` chunks (one abstract is about 2 chunks); returns the documents written."""
    with gzip.open(data / SCIFACT / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    out.mkdir(parents=True, exist_ok=True)
    wanted_docs = max(1, round(chunks_wanted / 2.0))
    written, copy = 0, 0
    while written < wanted_docs:
        with (out / f"copy{copy:03d}.corpus.jsonl").open("w", encoding="utf-8") as f:
            for d in docs:
                if written >= wanted_docs:
                    break
                tag = f"(copy {copy}) "
                f.write(
                    json.dumps(
                        {
                            "_id": f"{d['_id']}-{copy}",
                            "title": tag + d.get("title", ""),
                            "text": tag + d["text"],
                        }
                    )
                    + "\n"
                )
                written += 1
        copy += 1
    return written


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def peak_memory(index: Path | str | None) -> int:
    """VmHWM of a fresh process that imports structqa and then opens ``index`` and searches
    it, or (``"encoder"``) only embeds the queries, or (None) does nothing more."""
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(index) if index else "-"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_bytes"]


def build(folder: Path, index_dir: Path) -> dict[str, Any]:
    from structqa.documents import DocumentIndex

    t0 = time.perf_counter()
    last = [0.0]

    def progress(done: int, total: int) -> None:
        if time.perf_counter() - last[0] > 30:
            last[0] = time.perf_counter()
            print(
                f"  embedded {done}/{total} chunks ({time.perf_counter() - t0:.0f} s)", flush=True
            )

    with DocumentIndex(index_dir, create=True) as index:
        report = index.update([folder], progress=progress)
        chunks = len(index)
    seconds = time.perf_counter() - t0
    return {
        "chunks": chunks,
        "seconds": seconds,
        "chunks_per_s": chunks / seconds,
        "summary": report.summary(),
    }


def latency(port: int, questions: list[str], clients: int, seconds: float) -> dict[str, Any]:
    bodies = [json.dumps({"question": q, "top_k_chunks": 10}).encode() for q in questions]
    rec = Record()

    async def run() -> None:
        stop_at = time.monotonic() + seconds
        await asyncio.gather(
            *(_client(port, bodies, 7 * c, stop_at, rec, "/v1/ask") for c in range(clients))
        )

    asyncio.run(run())
    return _summary(rec, seconds)


def outside_reader(index_dir: Path, checkpoint: str, questions: list[str]) -> dict[str, float]:
    """Seconds of retrieval and of reading for the same questions, in-process."""
    from structqa.documents import DocumentIndex
    from structqa.prediction import Predictor

    reader = Predictor.from_checkpoint(checkpoint)
    with DocumentIndex.open(index_dir) as index:
        index.search("warm up", 10, "hybrid")
        reader.predict_batch([("warm up?", "A short passage to warm up.")])
        t0 = time.perf_counter()
        hits = index.search_many(questions, 10, "hybrid")
        search = time.perf_counter() - t0
        pairs = [(q, h.text) for q, hs in zip(questions, hits, strict=True) for h in hs]
        t0 = time.perf_counter()
        reader.predict_batch(pairs)
        read = time.perf_counter() - t0
    return {
        "questions": len(questions),
        "search_s": search,
        "read_s": read,
        "share_outside_reader": search / (search + read),
        "reader_runtime": reader.runtime,
    }


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--checkpoint", required=True, help="the reader for the ask timings")
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    p.add_argument("--seconds", type=float, default=60.0, help="per latency scenario")
    p.add_argument("--keep", help="keep the indexes here (SIZE/ under it)")
    p.add_argument("--reuse", action="store_true", help="use indexes already under --keep")
    p.add_argument("--out", default="docs/results/documents/bench")
    args = p.parse_args()
    prov = Provenance.start(args, pick_device())
    data = Path(args.data)
    with (data / SCIFACT / "queries_test.jsonl").open(encoding="utf-8") as f:
        questions = [json.loads(line)["text"] for line in f][:200]
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-docs-"))
    base_memory = peak_memory(None)
    encoder_memory = peak_memory("encoder")
    results: list[dict[str, Any]] = []
    for size in args.sizes:
        index_dir = root / str(size) / "index"
        row: dict[str, Any] = {"size": size}
        if args.reuse and (index_dir / "index.json").is_file():
            row["indexing"] = "reused"
        else:
            shutil.rmtree(root / str(size), ignore_errors=True)
            folder = root / str(size) / "corpus"
            row["documents"] = corpus_copies(data, size, folder)
            print(f"size {size}: indexing {row['documents']} documents", flush=True)
            row["indexing"] = build(folder, index_dir)
            print(f"  {row['indexing']['chunks_per_s']:.1f} chunks/s", flush=True)
        from structqa.documents import DocumentIndex

        with DocumentIndex.open(index_dir) as index:
            row["chunks"] = len(index)
        row["disk_bytes"] = dir_bytes(index_dir)
        row["disk_bytes_per_chunk"] = row["disk_bytes"] / row["chunks"]
        peak = peak_memory(index_dir)
        row["memory_bytes"] = peak - base_memory  # the searching process, encoder included
        row["index_memory_bytes"] = peak - encoder_memory  # the index's own share
        row["index_memory_bytes_per_100k_chunks"] = row["index_memory_bytes"] * 1e5 / row["chunks"]
        row["outside_reader"] = outside_reader(index_dir, args.checkpoint, questions[:50])
        server = Server(args.checkpoint, ["--index", str(index_dir)])
        try:
            row["ask"] = {str(c): latency(server.port, questions, c, args.seconds) for c in (1, 8)}
        finally:
            server.stop()
        print(json.dumps(row, indent=2), flush=True)
        results.append(row)
        prov.write_stamped(Path(args.out), "bench_documents", rows=results)
    path = prov.write_stamped(Path(args.out), "bench_documents", rows=results)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
