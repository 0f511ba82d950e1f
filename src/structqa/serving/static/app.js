// The structqa page: ask questions about a passage through POST /v1/answer, mark the chosen
// answer in the passage, and (DyREx/DyReF models) colour what the start/end queries attend to
// through POST /v1/explain. A server started with --index adds a documents mode: each question
// is asked of the whole collection (POST /v1/ask), and the chunk an answer was read in is shown
// with the answer marked and its source named. No framework, no network beyond this server.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { ready: null, context: "", results: [], selected: -1, explained: new Map(), mode: "passage" };

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value;
  if (key) h["X-API-Key"] = key;
  return h;
}

async function post(path, body) {
  const resp = await fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(body) });
  let data = null;
  try { data = await resp.json(); } catch (e) { data = null; }
  if (!resp.ok) {
    const msg = data && data.error ? data.error : `HTTP ${resp.status}`;
    throw new Error(msg);
  }
  return data;
}

function setStatus(text, isError) {
  const s = $("status");
  s.textContent = text;
  s.classList.toggle("error", Boolean(isError));
}

async function loadInfo() {
  try {
    const resp = await fetch("/ready");
    const info = await resp.json();
    state.ready = info;
    const m = info.model;
    $("model-info").textContent = m
      ? `model ${m.name} · head ${m.head} · encoder ${m.encoder} · ${info.status}`
      : `model: ${info.status}`;
    $("key-row").hidden = !info.api_key_required;
    if (info.explain === "dyrex" || info.explain === "dyref") {
      $("explain-row").hidden = false;
    }
    if (info.index) {
      $("mode-row").hidden = false;
      $("index-info").textContent = `(${info.index.chunks} chunks)`;
    }
    if (info.status === "loading") setTimeout(loadInfo, 1000);
  } catch (e) {
    $("model-info").textContent = "the server does not answer /ready";
  }
}

// The server's offsets count code points (Python's str); JavaScript strings index UTF-16
// units, so each character outside the BMP (an emoji) before an answer once shifted the mark.
function codeUnits(text) {
  const at = [0];
  let unit = 0;
  for (const ch of text) {
    unit += ch.length;
    at.push(unit);
  }
  return (cp) => at[Math.max(0, Math.min(cp, at.length - 1))];
}

function renderPassage() {
  const view = $("passage-view");
  view.replaceChildren();
  const r = state.results[state.selected];
  const docs = state.mode === "documents";
  const ctx = docs ? (r && r.context) || "" : state.context;
  $("view-title").textContent = docs ? "Where the answer was read" : "Passage";
  $("source-line").hidden = !docs || !r || r.no_answer;
  $("source-line").textContent = docs && r && !r.no_answer ? sourceText(r.source) : "";
  const att = r && !docs && $("explain-toggle").checked ? state.explained.get(state.selected) : null;
  if (att) {
    renderAttention(view, ctx, att, r);
    return;
  }
  if (!r || r.no_answer || r.start < 0) {
    view.textContent = ctx;
    return;
  }
  const unit = codeUnits(ctx);
  const [start, end] = [unit(r.start), unit(r.end)];
  const mark = document.createElement("mark");
  mark.id = "answer-mark";
  mark.textContent = ctx.slice(start, end);
  view.append(ctx.slice(0, start), mark, ctx.slice(end));
  mark.scrollIntoView({ block: "nearest" });
}

function renderAttention(view, ctx, att, r) {
  // context tokens of the window the map is of, in order; text between them stays plain
  const toks = [];
  att.offsets.forEach(([s, e], i) => { if (s >= 0) toks.push([s, e, att.start_weights[i], att.end_weights[i]]); });
  const top = Math.max(1e-9, ...toks.map((t) => Math.max(t[2], t[3])));
  const unit = codeUnits(ctx);
  let pos = 0;
  for (const [s, e, ws, we] of toks) {
    if (s > pos) view.append(ctx.slice(unit(pos), unit(s)));
    const span = document.createElement("span");
    span.textContent = ctx.slice(unit(s), unit(e));
    const a = (Math.max(ws, we) / top) ** 2;  // squared: max-pooled maps are high almost everywhere
    span.style.backgroundColor = ws >= we ? `rgba(37, 99, 235, ${a.toFixed(3)})` : `rgba(234, 88, 12, ${a.toFixed(3)})`;
    span.title = `start ${ws.toFixed(3)} · end ${we.toFixed(3)}`;
    if (!r.no_answer && s >= r.start && e <= r.end) span.classList.add("in-answer");
    view.append(span);
    pos = e;
  }
  view.append(ctx.slice(unit(pos)));
}

function renderResults(latencyMs) {
  const list = $("results");
  list.replaceChildren();
  state.results.forEach((r, i) => {
    const li = document.createElement("li");
    const pick = document.createElement("button");
    pick.type = "button";
    pick.className = "result";
    pick.setAttribute("aria-pressed", String(i === state.selected));
    const q = document.createElement("span");
    q.className = "question";
    q.textContent = r.question;
    const a = document.createElement("span");
    a.className = r.no_answer ? "answer none" : "answer";
    a.textContent = r.no_answer
      ? (r.source === undefined ? "No answer found" : "The documents do not answer this")
      : r.answer;
    const p = document.createElement("span");
    p.className = "prob";
    // an answer: the chance it is right; "no answer": (calibrated only) the chance that the
    // passage has none, which the uncalibrated n-best share does not estimate
    const shown = !r.no_answer || r.calibrated;
    p.textContent = shown ? `${(100 * r.probability).toFixed(1)}%${r.declined ? "*" : ""}` : "";
    p.title = r.no_answer
      ? "calibrated chance that the passage does not answer this question"
      : r.declined
        ? "declined by the reader in its chunk: the span's share of the n-best"
        : `${r.calibrated ? "calibrated chance" : "uncalibrated share of the n-best"} that this answer is right`;
    pick.append(q, a, p);
    if (r.source && !r.no_answer) {
      const src = document.createElement("span");
      src.className = "source";
      src.textContent = sourceText(r.source);
      pick.append(src);
    }
    pick.addEventListener("click", () => select(i));
    li.append(pick);
    if (r.nbest.length) {
      const details = document.createElement("details");
      const sum = document.createElement("summary");
      sum.textContent = `n-best (${r.nbest.length})`;
      const table = document.createElement("table");
      const head = table.createTHead().insertRow();
      const columns = r.source === undefined ? ["answer", "probability", "chars"] : ["answer", "probability", "source"];
      for (const t of columns) {
        const th = document.createElement("th");
        th.textContent = t;
        head.append(th);
      }
      const body = table.createTBody();
      for (const c of r.nbest) {
        const row = body.insertRow();
        row.insertCell().textContent = c.text;
        const share = row.insertCell();
        share.textContent = `${(100 * c.probability).toFixed(1)}%${c.declined ? "*" : ""}`;
        if (c.declined) share.title = "declined by the reader in its chunk: the span's share of the n-best";
        row.insertCell().textContent = c.source ? sourceText(c.source) : `${c.start}–${c.end}`;
      }
      details.append(sum, table);
      li.append(details);
    }
    list.append(li);
  });
  const n = state.results.length;
  setStatus(`${n} answer${n === 1 ? "" : "s"} in ${Math.round(latencyMs)} ms`);
  $("status").dataset.latencyMs = String(Math.round(latencyMs));
}

async function select(i) {
  state.selected = i;
  document.querySelectorAll("#results .result").forEach((b, j) => b.setAttribute("aria-pressed", String(i === j)));
  await maybeExplain();
  renderPassage();
}

async function maybeExplain() {
  const on = $("explain-toggle").checked;
  $("explain-legend").hidden = !on;
  const r = state.results[state.selected];
  if (!on || !r || state.mode === "documents" || state.explained.has(state.selected)) return;
  try {
    setStatus("computing the attention map…");
    state.explained.set(state.selected, await post("/v1/explain", { question: r.question, context: state.context }));
    setStatus("attention map of the window that holds the answer");
  } catch (e) {
    setStatus(e.message, true);
  }
}

function sourceText(s) {
  const page = s.page ? `, page ${s.page}` : "";
  return `${s.title || s.doc_id} · ${s.file}${page} · chars ${s.start}–${s.end}`;
}

// one /v1/ask reply as a result row: its best answer (marked in the chunk it was read in) and
// the others as the n-best, each with its source
function documentResult(question, out) {
  const sourced = (a) => ({
    text: a.text, probability: a.probability, declined: Boolean(a.declined),
    source: { title: a.title, doc_id: a.doc_id, file: a.source, page: a.page, start: a.start, end: a.end },
  });
  const best = out.answers[0];
  if (out.no_answer || !best) {
    return { question, no_answer: true, calibrated: false, probability: 0, nbest: [], source: null, context: "" };
  }
  return {
    question, no_answer: false, answer: best.text, probability: best.probability,
    // a span the reader declined (taken for the set-level decision) carries its n-best share
    calibrated: Boolean(out.calibrated) && !best.declined, declined: Boolean(best.declined),
    start: best.chunk_start, end: best.chunk_end,
    context: best.chunk_text, source: sourced(best).source, nbest: out.answers.slice(1).map(sourced),
  };
}

async function askDocuments(questions) {
  const t0 = performance.now();
  const replies = await Promise.all(questions.map((q) => post("/v1/ask", { question: q, top_k_chunks: 10, answers: 5 })));
  state.results = replies.map((out, i) => documentResult(questions[i], out));
  state.explained = new Map();
  state.selected = Math.max(0, state.results.findIndex((r) => !r.no_answer));
  renderResults(performance.now() - t0);
  await select(state.selected);
}

function setMode() {
  state.mode = $("mode-documents").checked ? "documents" : "passage";
  const docs = state.mode === "documents";
  $("passage-inputs").hidden = docs;
  $("passage").required = !docs;
  $("explain-row").hidden = docs || !(state.ready && ["dyrex", "dyref"].includes(state.ready.explain));
  state.results = [];
  state.selected = -1;
  $("results").replaceChildren();
  setStatus("");
  renderPassage();
}

async function ask(ev) {
  if (ev) ev.preventDefault();
  const context = $("passage").value;
  const questions = $("questions").value.split("\n").map((q) => q.trim()).filter(Boolean);
  if (state.mode === "documents") {
    if (!questions.length) { setStatus("Type at least one question.", true); $("questions").focus(); return; }
    $("ask").disabled = true;
    setStatus("searching the documents and reading…");
    try { await askDocuments(questions); } catch (e) { setStatus(e.message, true); } finally { $("ask").disabled = false; }
    return;
  }
  if (!context.trim()) { setStatus("Paste a passage first.", true); $("passage").focus(); return; }
  if (!questions.length) { setStatus("Type at least one question.", true); $("questions").focus(); return; }
  $("ask").disabled = true;
  setStatus("answering…");
  const t0 = performance.now();
  try {
    const out = await post("/v1/answer", questions.map((q) => ({ question: q, context, top_k: 5 })));
    state.context = context;
    state.results = out.map((r, i) => ({ ...r, question: questions[i] }));
    state.explained = new Map();
    // the first question that has an answer is shown in the passage (else the first question)
    state.selected = Math.max(0, state.results.findIndex((r) => !r.no_answer));
    renderResults(performance.now() - t0);
    await select(state.selected);
  } catch (e) {
    setStatus(e.message, true);
  } finally {
    $("ask").disabled = false;
  }
}

function readFile() {
  const f = $("file").files[0];
  if (!f) return;
  const reader = new FileReader();
  reader.onload = () => { $("passage").value = String(reader.result); setStatus(`read ${f.name}`); };
  reader.onerror = () => setStatus(`could not read ${f.name}`, true);
  reader.readAsText(f);
}

document.addEventListener("DOMContentLoaded", () => {
  $("ask-form").addEventListener("submit", ask);
  $("file").addEventListener("change", readFile);
  for (const id of ["mode-passage", "mode-documents"]) $(id).addEventListener("change", setMode);
  $("explain-toggle").addEventListener("change", async () => { await maybeExplain(); renderPassage(); });
  for (const id of ["passage", "questions"]) {
    $(id).addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) ask(ev);
    });
  }
  loadInfo();
});
