// The structqa page: ask questions about a passage through POST /v1/answer, mark the chosen
// answer in the passage, and (DyREx/DyReF models) colour what the start/end queries attend to
// through POST /v1/explain. A server started with --index adds a documents mode: each question
// is asked of the whole collection (POST /v1/ask), and the chunk an answer was read in is shown
// with the answer marked and its source named. No framework, no network beyond this server.
"use strict";

const TOP_K = 5;
const DEFAULT_BODY_BYTES = 4 * 1024 * 1024;  // the server's --max-body-bytes default
const DEFAULT_MAX_QUESTIONS = 32;  // the server's --max-questions default (items per request)
const DOCS_MAX_QUESTIONS = 20;  // /v1/ask requests one click sends at once
const EXPLAIN_MAX_CHARS = 20000;  // explain's own limit on the passage
const NO_SERVER = "The server did not answer (is it running?)";
// a reply later than this is given up (the server's own deadline, --request-timeout, is 30 s
// by default): a connection that never answers must not keep the page busy for good
const GIVE_UP_MS = 120000;
const GAVE_UP = "The server did not answer within two minutes; ask again";
const DECLINED = "declined by the reader in its chunk: the span's share of the n-best";

const $ = (id) => document.getElementById(id);
// seq numbers each Ask: a reply whose seq is no longer the latest (or whose mode is no longer
// the page's) is dropped. busy: an Ask is in flight (Ctrl+Enter does not see the button);
// again: Ctrl+Enter was pressed on other inputs while busy (asked: the inputs in flight).
const state = {
  ready: null, context: "", results: [], selected: -1, mode: "passage",
  seq: 0, busy: false, asked: "", again: false,
};

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value;
  if (key) h["X-API-Key"] = key;
  return h;
}

// the reply's JSON; else an Error with the server's message, its status and its fields
async function post(path, body) {
  let resp;
  const control = new AbortController();
  const timer = setTimeout(() => control.abort(), GIVE_UP_MS);
  try {
    resp = await fetch(path, {
      method: "POST", headers: headers(), signal: control.signal,
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
  } catch (e) {
    // (the browser's own words: "Failed to fetch", or the abort's)
    throw new Error(control.signal.aborted ? GAVE_UP : NO_SERVER);
  } finally {
    clearTimeout(timer);
  }
  let data = null;
  try { data = await resp.json(); } catch (e) { data = null; }
  if (!resp.ok) {
    const err = new Error(data && data.error ? data.error : `HTTP ${resp.status}`);
    err.status = resp.status;
    err.fields = data && Array.isArray(data.fields) ? data.fields : [];
    throw err;
  }
  return data;
}

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function setStatus(text, isError) {
  const s = $("status");
  s.textContent = text;
  s.classList.toggle("error", Boolean(isError));
}

function explainNote(text, isError) {
  const s = $("explain-status");
  s.textContent = text;
  s.classList.toggle("error", Boolean(isError));
}

const fmt = (n) => n.toLocaleString("en-US");
const byteSize = (text) => new Blob([text]).size;  // UTF-8 bytes, as sent
// characters as the server counts them (code points: an emoji is one, two UTF-16 units here)
const charCount = (text) => text.length - (text.match(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g) || []).length;
const canExplain = () => Boolean(state.ready && ["dyrex", "dyref"].includes(state.ready.explain));
const maxContext = () => (state.ready && state.ready.max_context_chars) || 0;
// /ready reports neither limit today: the defaults, unless a server says otherwise
const bodyLimit = () => (state.ready && state.ready.max_body_bytes) || DEFAULT_BODY_BYTES;
const questionLimit = () => (state.ready && state.ready.max_questions) || DEFAULT_MAX_QUESTIONS;

async function loadInfo() {
  let info;
  try {
    const resp = await fetch("/ready");
    info = await resp.json();
  } catch (e) {
    $("model-info").textContent = "The server does not answer /ready (is it running?); trying again…";
    setTimeout(loadInfo, 3000);
    return;
  }
  state.ready = info;
  const m = info.model;
  $("model-info").textContent = m
    ? `model ${m.name} · head ${m.head} · encoder ${m.encoder} · ${info.status}`
    : `model: ${info.status}`;
  $("key-row").hidden = !info.api_key_required;
  $("explain-row").hidden = state.mode === "documents" || !canExplain();
  if (info.index) {
    $("mode-row").hidden = false;
    $("index-info").textContent = `(${info.index.chunks} chunks)`;
  }
  if (info.status === "loading") setTimeout(loadInfo, 1000);
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
  const found = Boolean(r && !r.no_answer && !r.error);
  $("view-title").textContent = docs ? "Where the answer was read" : "Passage";
  $("source-line").hidden = !docs || !found || !r.source;
  $("source-line").textContent = docs && found ? sourceText(r.source) : "";
  const att = r && !docs && $("explain-toggle").checked ? r.attention : null;
  if (att) {
    renderAttention(view, ctx, att, r);
    return;
  }
  if (!found || r.start < 0) {
    view.textContent = ctx;
    return;
  }
  const unit = codeUnits(ctx);
  const [start, end] = [unit(r.start), unit(r.end)];
  const mark = el("mark", "", ctx.slice(start, end));
  mark.id = "answer-mark";
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
    const span = el("span", "", ctx.slice(unit(s), unit(e)));
    const a = (Math.max(ws, we) / top) ** 2;  // squared: max-pooled maps are high almost everywhere
    span.style.backgroundColor = ws >= we ? `rgba(37, 99, 235, ${a.toFixed(3)})` : `rgba(234, 88, 12, ${a.toFixed(3)})`;
    span.title = `start ${ws.toFixed(3)} · end ${we.toFixed(3)}`;
    if (!r.no_answer && s >= r.start && e <= r.end) span.classList.add("in-answer");
    view.append(span);
    pos = e;
  }
  view.append(ctx.slice(unit(pos)));
}

function answerText(r) {
  if (!r.no_answer) return r.answer;
  if (r.source === undefined) return "No answer found";
  return r.unmatched ? "No document matched this question" : "The documents do not answer this";
}

function resultRow(r, i) {
  const li = el("li");
  if (r.error) {  // a question that failed: its own row, the others answered
    const box = el("div", "result failed");
    box.append(el("span", "question", r.question), el("span", "answer error", r.error));
    li.append(box);
    return li;
  }
  const pick = el("button", "result");
  pick.type = "button";
  pick.setAttribute("aria-pressed", String(i === state.selected));
  // an answer: the chance it is right; "no answer": (calibrated only) the chance that the
  // passage has none, which the uncalibrated n-best share does not estimate
  const shown = !r.no_answer || r.calibrated;
  const p = el("span", "prob", shown ? `${(100 * r.probability).toFixed(1)}%${r.declined ? "*" : ""}` : "");
  p.title = r.no_answer
    ? "calibrated chance that the passage does not answer this question"
    : r.declined
      ? DECLINED
      : `${r.calibrated ? "calibrated chance" : "uncalibrated share of the n-best"} that this answer is right`;
  pick.append(el("span", "question", r.question), el("span", r.no_answer ? "answer none" : "answer", answerText(r)), p);
  if (r.source && !r.no_answer) pick.append(el("span", "source", sourceText(r.source)));
  pick.addEventListener("click", () => select(i));
  li.append(pick);
  if (r.nbest.length) {
    const details = el("details");
    const table = el("table");
    const head = table.createTHead().insertRow();
    const columns = r.source === undefined ? ["answer", "probability", "chars"] : ["answer", "probability", "source"];
    for (const t of columns) head.append(el("th", "", t));
    const body = table.createTBody();
    for (const c of r.nbest) {
      const row = body.insertRow();
      row.insertCell().textContent = c.text;
      const share = row.insertCell();
      share.textContent = `${(100 * c.probability).toFixed(1)}%${c.declined ? "*" : ""}`;
      if (c.declined) share.title = DECLINED;
      row.insertCell().textContent = c.source ? sourceText(c.source) : `${c.start}–${c.end}`;
    }
    details.append(el("summary", "", `n-best (${r.nbest.length})`), table);
    li.append(details);
  }
  return li;
}

function renderResults(latencyMs, note) {
  $("results").replaceChildren(...state.results.map(resultRow));
  const declined = state.results.some((r) => r.declined || (r.nbest || []).some((c) => c.declined));
  $("declined-note").hidden = !declined;
  const n = state.results.filter((r) => !r.error).length;
  const failed = state.results.length - n;
  let text = `${n} answer${n === 1 ? "" : "s"}`;
  if (failed) text += `, ${failed} question${failed === 1 ? "" : "s"} failed`;
  text += ` in ${Math.round(latencyMs)} ms.`;
  const top = state.results[state.selected];
  if (top && !top.error && !top.no_answer) text += ` Shown: “${top.answer}” (question on line ${top.line}).`;
  setStatus(note ? `${note} ${text}` : text, n === 0);
  $("status").dataset.latencyMs = String(Math.round(latencyMs));
}

function select(i) {
  state.selected = i;
  [...$("results").children].forEach((li, j) => {
    const pick = li.querySelector("button.result");  // (a failed question's row has none)
    if (pick) pick.setAttribute("aria-pressed", String(i === j));
  });
  renderPassage();
  return maybeExplain();
}

// The attention map of the selected result, fetched once per result (kept on the result, so a
// map asked for under an older Ask never lands on a newer one); its progress and failures are
// said beside the toggle, never in the answers' status.
async function maybeExplain() {
  const on = $("explain-toggle").checked;
  $("explain-legend").hidden = !on;
  const r = state.results[state.selected];
  if (!on || !r || r.error || state.mode !== "passage") { explainNote(""); return; }
  if (r.attention) { explainNote("attention map of the window that holds the answer"); return; }
  if (r.explainError) { explainNote(`No attention map: ${r.explainError}`, true); return; }
  const context = state.context;
  const n = charCount(context);
  if (n > EXPLAIN_MAX_CHARS) {
    explainNote(`No attention map: the passage has ${fmt(n)} characters, over the ${fmt(EXPLAIN_MAX_CHARS)} a map is drawn for.`);
    return;
  }
  if (!r.explaining) {
    r.explaining = post("/v1/explain", { question: r.question, context })
      .then((att) => { r.attention = att; }, (e) => { r.explainError = plainMessage(e); })
      .finally(() => { r.explaining = null; });
  }
  explainNote("computing the attention map…");
  await r.explaining;
  if (state.results[state.selected] === r && state.mode === "passage") {
    await maybeExplain();  // says how it went (or that the toggle was turned off)
    renderPassage();
  }
}

function sourceText(s) {
  if (!s) return "";
  const page = s.page ? `, page ${s.page}` : "";
  return `${s.title || s.doc_id} · ${s.file}${page} · chars ${s.start}–${s.end}`;
}

// An error's message for the page's user: without the API usage ("Expected {...} or a list
// of them") and without the item a single passage is named by ("item 0: ").
function plainMessage(e) {
  return e.message.replace(/\.? Expected [\s\S]*$/, "").replace(/^item \d+: /, "");
}

// a field's message about a question, said of "it" (the row names the line)
const questionMessage = (m) => m.replace(/^pair \d+: /, "").replace(/^the question /, "it ");

function failedRow(item, message) {
  return { question: item.question, line: item.line, error: `Question on line ${item.line}: ${message}`, no_answer: true, nbest: [] };
}

// The non-empty lines of the questions box, each with its line number (1-based).
function questionLines(text) {
  return text.split("\n").map((q, i) => ({ question: q.trim(), line: i + 1 })).filter((it) => it.question);
}

// The items as lists that each fit one /v1/answer request: at most the server's questions per
// request, and a JSON body under its byte limit (the passage is copied into every item).
function batches(items, context, maxBytes, maxItems) {
  const base = byteSize(JSON.stringify({ question: "", context, top_k: TOP_K })) - 2;  // less ""
  const out = [];
  let batch = [];
  let size = 0;  // the items' bytes, each with its comma or closing bracket
  for (const item of items) {
    const n = base + byteSize(JSON.stringify(item.question)) + 1;
    if (batch.length && (batch.length >= maxItems || 1 + size + n > maxBytes)) {
      out.push(batch);
      batch = [];
      size = 0;
    }
    batch.push(item);
    size += n;
  }
  if (batch.length) out.push(batch);
  return out;
}

// For a 422 that names only questions ("[2].question"): index in the batch -> message; empty
// for any other error (the passage's, the body's, the server's), which fails the whole Ask.
function refusedQuestions(e, n) {
  const out = new Map();
  if (e.status !== 422 || !e.fields.length) return out;
  for (const f of e.fields) {
    const m = /^\[(\d+)\]\.question$/.exec(f.field);
    if (!m || Number(m[1]) >= n) return new Map();
    out.set(Number(m[1]), questionMessage(f.message));
  }
  return out;
}

// whether the Ask numbered seq is still the one whose reply is shown
const current = (seq) => seq === state.seq && !state.again;

// One batch answered into done (line -> result); questions the server refuses get their own
// row and the rest are sent again. A passage error throws (said once, not per question).
async function answerBatch(batch, context, done, seq) {
  let left = batch;
  while (left.length && current(seq)) {
    let out;
    try {
      out = await post("/v1/answer", left.map((it) => ({ question: it.question, context, top_k: TOP_K })));
    } catch (e) {
      const refused = refusedQuestions(e, left.length);
      if (!refused.size) throw e;
      refused.forEach((message, k) => done.set(left[k].line, failedRow(left[k], message)));
      left = left.filter((_, k) => !refused.has(k));
      continue;
    }
    left.forEach((it, k) => done.set(it.line, { ...out[k], question: it.question, line: it.line }));
    return;
  }
}

async function askPassage(context, items, seq) {
  const done = new Map();
  try {
    for (const batch of batches(items, context, bodyLimit(), questionLimit())) {
      await answerBatch(batch, context, done, seq);
      if (!current(seq)) return [];  // (its reply would be dropped)
    }
  } catch (e) {
    const field = e.fields && e.fields.find((f) => /(^|\.)context$/.test(f.field));
    throw new Error(field ? `Passage: ${field.message}` : plainMessage(e));
  }
  return items.map((it) => done.get(it.line));
}

// one /v1/ask reply as a result row: its best answer (marked in the chunk it was read in) and
// the others as the n-best, each with its source
function documentResult(item, out) {
  const sourced = (a) => ({
    text: a.text, probability: a.probability, declined: Boolean(a.declined),
    source: { title: a.title, doc_id: a.doc_id, file: a.source, page: a.page, start: a.start, end: a.end },
  });
  const { question, line } = item;
  const best = out.answers[0];
  if (out.no_answer || !best) {
    // nothing retrieved (an empty index, no hit): not the documents' answer "none"
    const unmatched = !out.retrieved || !out.retrieved.length;
    return { question, line, no_answer: true, unmatched, calibrated: false, probability: 0, nbest: [], source: null, context: "" };
  }
  return {
    question, line, no_answer: false, answer: best.text, probability: best.probability,
    // a span the reader declined (taken for the set-level decision) carries its n-best share
    calibrated: Boolean(out.calibrated) && !best.declined, declined: Boolean(best.declined),
    start: best.chunk_start, end: best.chunk_end,
    context: best.chunk_text, source: sourced(best).source, nbest: out.answers.slice(1).map(sourced),
  };
}

// each question asked on its own: one that fails is said in its own row, the others answered
async function askDocuments(items) {
  const body = (q) => ({ question: q, top_k_chunks: 10, answers: TOP_K });
  const settled = await Promise.allSettled(items.map((it) => post("/v1/ask", body(it.question))));
  // every question refused alike, none for itself (a wrong key, the server down or busy):
  // said once, as passage mode says it, not once a row
  const refusals = settled.filter((s) => s.status === "rejected").map((s) => s.reason);
  const own = (r) => r.fields && r.fields.some((f) => f.field === "question");
  if (refusals.length === settled.length && !refusals.some(own)
      && new Set(refusals.map((r) => r.message)).size === 1) {
    throw refusals[0];
  }
  return settled.map((s, k) => {
    if (s.status === "fulfilled") return documentResult(items[k], s.value);
    const field = s.reason.fields && s.reason.fields.find((f) => f.field === "question");
    return failedRow(items[k], field ? questionMessage(field.message) : plainMessage(s.reason));
  });
}

function setBusy(on) {
  state.busy = on;
  $("ask").disabled = on;
  for (const id of ["mode-passage", "mode-documents"]) $(id).disabled = on;
  $("results").setAttribute("aria-busy", String(on));
}

function setMode() {
  state.mode = $("mode-documents").checked ? "documents" : "passage";
  state.seq += 1;  // a reply asked for in the other mode is not shown in this one
  const docs = state.mode === "documents";
  $("passage-inputs").hidden = docs;
  $("passage").required = !docs;
  $("explain-row").hidden = docs || !canExplain();
  state.results = [];
  state.selected = -1;
  $("results").replaceChildren();
  $("declined-note").hidden = true;
  setStatus("");
  explainNote("");
  renderPassage();
}

// what is wrong with the inputs before anything is sent: [message, the field to focus] or null
function inputProblem(mode, context, items) {
  if (mode === "passage") {
    if (!context.trim()) return ["Paste a passage first.", "passage"];
    const n = charCount(context);
    const max = maxContext();
    if (max && n > max) {
      return [`The passage has ${fmt(n)} characters; this server takes at most ${fmt(max)}. Shorten it.`, "passage"];
    }
  }
  if (!items.length) return ["Type at least one question.", "questions"];
  return null;
}

// what an Ask reads, to tell whether a second Ctrl+Enter during one asks something new
const inputs = () => [state.mode, $("passage").value, $("questions").value].join("\u0000");

async function ask(ev) {
  if (ev) ev.preventDefault();
  if (state.busy) {
    // one request at a time (Ctrl+Enter does not go through the disabled button): when the
    // inputs changed since, this reply is dropped and the new inputs are asked once it is in
    state.again = inputs() !== state.asked;
    return;
  }
  state.asked = inputs();
  state.again = false;
  const mode = state.mode;
  const context = $("passage").value;
  let items = questionLines($("questions").value);
  const problem = inputProblem(mode, context, items);
  if (problem) {
    setStatus(problem[0], true);
    $(problem[1]).focus();
    return;
  }
  let note = "";
  if (mode === "documents" && items.length > DOCS_MAX_QUESTIONS) {
    note = `Asked the first ${DOCS_MAX_QUESTIONS} of ${items.length} questions (at most ${DOCS_MAX_QUESTIONS} at a time).`;
    items = items.slice(0, DOCS_MAX_QUESTIONS);
  }
  const seq = ++state.seq;
  setBusy(true);
  setStatus(mode === "documents" ? "searching the documents and reading…" : "answering…");
  const t0 = performance.now();
  try {
    const results = mode === "documents" ? await askDocuments(items) : await askPassage(context, items, seq);
    if (!current(seq) || mode !== state.mode) return;  // superseded: dropped
    state.context = mode === "passage" ? context : "";
    state.results = results;
    // the first question that has an answer is shown (else the first question)
    state.selected = Math.max(0, results.findIndex((r) => !r.no_answer && !r.error));
    renderResults(performance.now() - t0, note);
    select(state.selected);  // (its attention map, if asked for, does not hold up the next Ask)
  } catch (e) {
    if (current(seq) && mode === state.mode) setStatus(e.message, true);
  } finally {
    setBusy(false);
    if (state.again) ask();
  }
}

function readFile() {
  const f = $("file").files[0];
  if (!f) return;
  const max = maxContext();
  const refuse = (n) => {
    setStatus(`${f.name} has ${n} characters; this server takes at most ${fmt(max)}. Not loaded.`, true);
    $("file").value = "";
  };
  if (max && f.size > 4 * max) { refuse(`over ${fmt(max)}`); return; }  // (UTF-8: at most 4 bytes a character)
  const reader = new FileReader();
  reader.onload = () => {
    const text = String(reader.result);
    const n = charCount(text);
    if (max && n > max) { refuse(fmt(n)); return; }
    $("passage").value = text;
    setStatus(`read ${f.name}`);
  };
  reader.onerror = () => setStatus(`could not read ${f.name}`, true);
  reader.readAsText(f);
}

document.addEventListener("DOMContentLoaded", () => {
  $("ask-form").addEventListener("submit", ask);
  $("file").addEventListener("change", readFile);
  for (const id of ["mode-passage", "mode-documents"]) $(id).addEventListener("change", setMode);
  $("explain-toggle").addEventListener("change", async () => { renderPassage(); await maybeExplain(); });
  for (const id of ["passage", "questions"]) {
    $(id).addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) ask(ev);
    });
  }
  loadInfo();
});
