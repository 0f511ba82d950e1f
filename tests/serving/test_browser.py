"""The web page in a real browser (headless Chromium through selenium): type a passage and a
question, click, and the highlighted text is the API's answer.

Needs /usr/bin/chromium (or chromium-browser) and chromedriver: `bash scripts/install-browser.sh`
installs them (Debian packages, as root); without them the test skips and says so. A screenshot
is always saved under the test's tmp dir, and also to $STRUCTQA_SCREENSHOT when set (e.g.
docs/images/serve-page.png). $STRUCTQA_BROWSER_CHECKPOINT serves another checkpoint than the
tiny DyREx one (e.g. a trained quickstart model, for the README's screenshot)."""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from pathlib import Path

import pytest
from serving_support import serve_command

pytestmark = pytest.mark.browser

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
)


def _browser_paths() -> tuple[str, str]:
    chromium = next(
        (p for p in ("chromium", "chromium-browser", "google-chrome") if shutil.which(p)), None
    )
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip(
            "NO BROWSER: the page test needs chromium and chromedriver; run "
            "`bash scripts/install-browser.sh` (as root, installs Debian's chromium "
            "chromium-driver)"
        )
    return shutil.which(chromium) or chromium, driver


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    pytest.importorskip("selenium", reason="pip install -e '.[dev]' installs selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = _browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    browser = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    browser.set_page_load_timeout(60)
    yield browser
    browser.quit()


@pytest.fixture(scope="module")
def page_url(tiny_dyrex_run: Path):
    checkpoint = os.environ.get("STRUCTQA_BROWSER_CHECKPOINT") or tiny_dyrex_run
    if not Path(checkpoint).is_dir():  # (else every test waits out the server's start)
        pytest.fail(f"STRUCTQA_BROWSER_CHECKPOINT={checkpoint}: no such checkpoint directory")
    with serve_command(Path(checkpoint)) as url:
        yield url


@pytest.fixture(scope="module")
def passage(shared_data: Path) -> tuple[str, list[str]]:
    """The first paragraph of the mini SQuAD fixture and two of its questions."""
    data = json.loads((shared_data / "fixtures/squad-v1.1-mini.json").read_text("utf-8"))
    paragraph = data["data"][0]["paragraphs"][0]
    return paragraph["context"], [qa["question"] for qa in paragraph["qas"][:2]]


def _api(url: str, question: str | list[str], context: str) -> dict | list[dict]:
    """POST /v1/answer as the page does: a list of questions is one request, as the page
    sends them (in bf16, windows batched with others round their sums apart: one question
    asked alone can come back a tenth of a percentage point away)."""
    if isinstance(question, list):
        body: object = [{"question": q, "context": context, "top_k": 5} for q in question]
    else:
        body = {"question": question, "context": context}
    req = urllib.request.Request(
        url + "/v1/answer", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def _screenshot(driver, tmp_path: Path, suffix: str = "") -> None:
    """To the test's tmp dir, and to $STRUCTQA_SCREENSHOT (with ``suffix`` before .png)."""
    driver.save_screenshot(str(tmp_path / f"serve-page{suffix}.png"))
    target = os.environ.get("STRUCTQA_SCREENSHOT")
    if target:
        path = Path(target)
        path = path.with_name(path.stem + suffix + path.suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(path))


def test_the_page_highlights_the_apis_answer(driver, page_url, passage, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    context, questions = passage
    driver.get(page_url + "/")
    wait = WebDriverWait(driver, 60)
    wait.until(lambda d: "head" in d.find_element(By.ID, "model-info").text)
    driver.find_element(By.ID, "passage").send_keys(context)
    driver.find_element(By.ID, "questions").send_keys("\n".join(questions))
    driver.find_element(By.ID, "ask").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results li")) == 2)
    expected = _api(page_url, questions, context)
    assert isinstance(expected, list)
    # before any click, the passage shows the first question's answer that is not "no answer"
    first = next((a for a in expected if not a["no_answer"]), None)
    if first is None:
        assert not driver.find_elements(By.ID, "answer-mark")
    else:
        wait.until(lambda d, a=first: d.find_element(By.ID, "answer-mark").text == a["answer"])
    for i, answer in enumerate(expected):
        driver.find_elements(By.CSS_SELECTOR, "#results button.result")[i].click()
        prob = driver.find_elements(By.CSS_SELECTOR, "#results .prob")[i].text
        shown = not answer["no_answer"] or answer["calibrated"]
        if shown:  # (JS and Python may round a tie apart: compared within the last digit)
            assert abs(float(prob.rstrip("%")) - 100 * answer["probability"]) <= 0.051
        else:
            assert prob == ""
        if answer["no_answer"]:
            assert "No answer found" in driver.find_element(By.ID, "results").text
            continue
        mark = wait.until(ec.presence_of_element_located((By.ID, "answer-mark")))
        wait.until(lambda d, a=answer: d.find_element(By.ID, "answer-mark").text == a["answer"])
        assert mark.text == answer["answer"]  # (re-read: the page re-renders on select)
    # back to the first question for the picture; the status line carries the latency
    driver.find_elements(By.CSS_SELECTOR, "#results button.result")[0].click()
    assert "ms" in driver.find_element(By.ID, "status").text
    _screenshot(driver, tmp_path)


def test_the_attention_toggle_colours_the_passage(driver, page_url, passage, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    explain = json.loads(urllib.request.urlopen(page_url + "/ready", timeout=10).read())["explain"]
    if explain not in ("dyrex", "dyref"):
        pytest.skip(f"the served head has no query attention ({explain})")
    toggle = driver.find_element(By.ID, "explain-toggle")
    assert toggle.is_displayed()
    toggle.send_keys(" ")  # the keyboard, as a user without a mouse would
    wait = WebDriverWait(driver, 60)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#passage-view span[title^='start']"))
    spans = driver.find_elements(By.CSS_SELECTOR, "#passage-view span[title^='start']")
    assert len(spans) > 10
    # the coloured passage still reads as the passage
    assert driver.find_element(By.ID, "passage-view").text.split() == passage[0].split()
    _screenshot(driver, tmp_path, "-attention")


def test_a_txt_file_fills_the_passage(driver, page_url, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    text = "The Broncos won the game.\nThe Panthers lost it."
    upload = tmp_path / "passage.txt"
    upload.write_text(text, encoding="utf-8")
    driver.get(page_url + "/")
    driver.find_element(By.ID, "file").send_keys(str(upload))
    passage = driver.find_element(By.ID, "passage")
    WebDriverWait(driver, 30).until(lambda d: passage.get_attribute("value") == text)
    assert "passage.txt" in driver.find_element(By.ID, "status").text


def test_an_answer_after_emoji_is_marked_where_the_api_says(driver, page_url):
    """The API's offsets count code points; the page's strings count UTF-16 units, two for
    an emoji: the mark (and the attention spans) must convert, or it lands a character early
    for each emoji before the answer."""
    context = "\U0001f600\U0001f600\U0001f600 The Denver Broncos won Super Bowl 50 \U0001f3c8."
    start = context.index("Denver")
    end = start + len("Denver Broncos")
    driver.get(page_url + "/")
    shown = driver.execute_script(
        """
        state.context = arguments[0];
        state.results = [{question: "Who won?", no_answer: false, answer: arguments[0],
          probability: 0.5, calibrated: false, start: arguments[1], end: arguments[2],
          nbest: []}];
        state.selected = 0;
        renderPassage();
        return [document.getElementById("answer-mark").textContent,
                document.getElementById("passage-view").textContent];
        """,
        context,
        start,
        end,
    )
    assert shown == [context[start:end], context]


@pytest.fixture(scope="module")
def documents_url(tiny_dyrex_run: Path, shared_data: Path, tmp_path_factory):
    """A server started with --index over the mini SQuAD fixture's passages."""
    from structqa.cli import main

    index = tmp_path_factory.mktemp("page-index") / "index"
    mini = shared_data / "fixtures" / "squad-v1.1-mini.json"
    assert main(["index", str(mini), "--out", str(index), "--no-progress"]) == 0
    checkpoint = os.environ.get("STRUCTQA_BROWSER_CHECKPOINT") or tiny_dyrex_run
    with serve_command(Path(checkpoint), "--index", str(index)) as url:
        yield url


def test_documents_mode_marks_the_answer_in_its_source(driver, documents_url, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    questions = [
        "What sits on top of the Main Building at Notre Dame?",
        "What did the brother of John Zahm construct at Notre Dame?",
    ]
    driver.get(documents_url + "/")
    wait = WebDriverWait(driver, 60)
    mode = wait.until(lambda d: d.find_element(By.ID, "mode-documents"))
    wait.until(lambda d: d.find_element(By.ID, "mode-row").is_displayed())
    assert "chunks" in driver.find_element(By.ID, "index-info").text
    mode.click()
    assert not driver.find_element(By.ID, "passage").is_displayed()  # no passage to paste
    driver.find_element(By.ID, "questions").send_keys("\n".join(questions))
    driver.find_element(By.ID, "ask").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results li")) == 2)
    for i, question in enumerate(questions):
        req = urllib.request.Request(
            documents_url + "/v1/ask",
            json.dumps({"question": question, "top_k_chunks": 10, "answers": 5}).encode(),
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            expected = json.loads(resp.read())
        driver.find_elements(By.CSS_SELECTOR, "#results button.result")[i].click()
        shown = driver.find_elements(By.CSS_SELECTOR, "#results button.result")[i].text
        if expected["no_answer"]:
            assert "The documents do not answer this" in shown
            wait.until(lambda d: not d.find_elements(By.ID, "answer-mark"))
            continue
        best = expected["answers"][0]
        wait.until(lambda d, b=best: d.find_element(By.ID, "answer-mark").text == b["text"])
        # the chunk it was read in is shown around the mark, and its source is named
        view = driver.find_element(By.ID, "passage-view").text
        assert view.split() == best["chunk_text"].split()
        source = driver.find_element(By.ID, "source-line").text
        assert Path(best["source"]).name in source and f"{best['start']}" in source
        assert Path(best["source"]).name in shown
    driver.find_elements(By.CSS_SELECTOR, "#results button.result")[0].click()
    _screenshot(driver, tmp_path, "-documents")


# fetch wrapped in the page: each POST to a path holding ``arguments[0]`` is recorded (its body's
# UTF-8 size and its questions), counted while in flight, and the first one held ``arguments[1]`` ms
RECORD_FETCH = """
const [path, holdMs] = arguments;
window.recorded = { bodies: [], live: 0, most: 0 };
const real = window.fetch;
window.fetch = async (url, opts) => {
  if (!String(url).includes(path)) return real.call(window, url, opts);
  const rec = window.recorded;
  const body = JSON.parse(opts.body);
  rec.bodies.push({ bytes: new Blob([opts.body]).size,
                    questions: (Array.isArray(body) ? body : [body]).map((b) => b.question) });
  rec.live += 1;
  rec.most = Math.max(rec.most, rec.live);
  try {
    if (rec.bodies.length === 1) await new Promise((ok) => setTimeout(ok, holdMs));
    return await real.call(window, url, opts);
  } finally {
    rec.live -= 1;
  }
};
"""


def _open_page(driver, url: str):
    """The page, fresh, once /ready has named the model."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url + "/")
    wait = WebDriverWait(driver, 60)
    wait.until(lambda d: "head" in d.find_element(By.ID, "model-info").text)
    return wait


def _fill(driver, passage: str, questions: str) -> None:
    """The passage and questions boxes, set at once (typing 2,000 characters takes long)."""
    driver.execute_script(
        "document.getElementById('passage').value = arguments[0];"
        "document.getElementById('questions').value = arguments[1];",
        passage,
        questions,
    )


def _answered(driver, wait) -> None:
    """Until the Ask in flight is in (the button enabled again, no request left)."""
    wait.until(
        lambda d: d.execute_script(
            "return !document.getElementById('ask').disabled"
            " && (!window.recorded || window.recorded.live === 0)"
        )
    )


def _rows(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    return [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#results > li")]


def _shown(answer: dict) -> str:
    return "No answer found" if answer["no_answer"] else answer["answer"]


def test_a_refused_question_names_its_line_and_the_others_are_answered(driver, page_url, passage):
    """A question longer than the model reads, among good ones: its row names its line in the
    box, and the other questions are still answered (the whole list once failed, naming
    "pair 1" by its index among the non-empty lines)."""
    context, questions = passage
    wait = _open_page(driver, page_url)
    too_long = "why " * 600  # 2,400 characters, far more tokens than a question may have
    _fill(driver, context, f"{questions[0]}\n\n{too_long}\n{questions[1]}")
    driver.find_element("id", "ask").click()
    _answered(driver, wait)
    rows = _rows(driver)
    assert len(rows) == 3, (rows, driver.find_element("id", "status").text)
    assert "Question on line 3:" in rows[1] and "tokens" in rows[1]
    assert "pair" not in rows[1] and "Expected" not in rows[1]
    expected = _api(page_url, questions, context)
    assert _shown(expected[0]) in rows[0] and _shown(expected[1]) in rows[2]
    assert "1 question failed" in driver.find_element("id", "status").text


def test_ctrl_enter_during_an_ask_sends_no_second_request_at_once(driver, page_url, passage):
    """Ctrl+Enter does not go through the disabled button: pressed again while an Ask is in
    flight (the questions changed), the page once sent a second request beside the first, and
    the slower reply (the older questions') replaced the newer one."""
    from selenium.webdriver.common.keys import Keys

    context, questions = passage
    wait = _open_page(driver, page_url)
    driver.execute_script(RECORD_FETCH, "/v1/answer", 1500)
    _fill(driver, context, questions[0])
    box = driver.find_element("id", "questions")
    box.send_keys(Keys.CONTROL, Keys.ENTER)
    _fill(driver, context, questions[1])
    box.send_keys(Keys.CONTROL, Keys.ENTER)
    box.send_keys(Keys.CONTROL, Keys.ENTER)  # the same inputs again: nothing more to ask
    wait.until(lambda d: d.execute_script("return window.recorded.bodies.length") >= 2)
    _answered(driver, wait)
    recorded = driver.execute_script("return window.recorded")
    assert recorded["most"] == 1  # never two at once
    assert [b["questions"] for b in recorded["bodies"]] == [[questions[0]], [questions[1]]]
    rows = _rows(driver)
    assert len(rows) == 1 and questions[1] in rows[0]  # the newest input's answer
    assert _shown(_api(page_url, [questions[1]], context)[0]) in rows[0]


def test_questions_are_sent_in_requests_under_the_body_limit(driver, page_url, passage):
    """The passage is copied into every item of /v1/answer: the questions are split across
    requests whose bodies fit the server's limit (here a small one the page is told), and
    the answers come back in the order of the lines."""
    context, questions = passage
    asked = [questions[0], questions[1], f"{questions[0]} ", "Where is it?"]
    item = len(json.dumps({"question": asked[0], "context": context, "top_k": 5}).encode())
    limit = 2 * item + 50  # two items per request at most
    wait = _open_page(driver, page_url)
    driver.execute_script("state.ready.max_body_bytes = arguments[0];", limit)
    driver.execute_script(RECORD_FETCH, "/v1/answer", 0)
    _fill(driver, context, "\n".join(asked))
    driver.find_element("id", "ask").click()
    _answered(driver, wait)
    bodies = driver.execute_script("return window.recorded.bodies")
    assert len(bodies) >= 2 and all(b["bytes"] <= limit for b in bodies), bodies
    assert [q for b in bodies for q in b["questions"]] == [q.strip() for q in asked]
    rows = _rows(driver)
    assert len(rows) == 4
    for row, question in zip(rows, asked, strict=True):
        assert question.strip() in row


def test_the_mode_cannot_change_while_an_ask_runs(driver, documents_url, passage):
    """Switching "Answer from" during an Ask once drew the passage's reply as documents'
    (an error in red) or the other way round: the radios are disabled until it is in."""
    from selenium.webdriver.common.by import By

    context, questions = passage
    wait = _open_page(driver, documents_url)
    wait.until(lambda d: d.find_element(By.ID, "mode-row").is_displayed())
    driver.execute_script(RECORD_FETCH, "/v1/answer", 1500)
    _fill(driver, context, questions[0])
    driver.find_element(By.ID, "ask").click()
    documents = driver.find_element(By.ID, "mode-documents")
    assert not documents.is_enabled()
    driver.execute_script("arguments[0].click();", documents)  # (disabled: no effect)
    _answered(driver, wait)
    assert documents.is_enabled() and not documents.is_selected()
    assert len(_rows(driver)) == 1
    assert "error" not in driver.find_element(By.ID, "status").get_attribute("class")
    assert driver.find_element(By.ID, "passage-view").text.split() == context.split()


def test_documents_mode_a_refused_question_fails_in_its_own_row(driver, documents_url):
    """Each question is its own /v1/ask: one the server refuses (over 2,000 characters) is said
    in its row, naming its line, and the others are answered (one failure once discarded every
    answer)."""
    from selenium.webdriver.common.by import By

    wait = _open_page(driver, documents_url)
    wait.until(lambda d: d.find_element(By.ID, "mode-row").is_displayed())
    driver.find_element(By.ID, "mode-documents").click()
    good = "What sits on top of the Main Building at Notre Dame?"
    _fill(driver, "", f"{good}\n\n{'why ' * 600}")
    driver.find_element(By.ID, "ask").click()
    _answered(driver, wait)
    rows = _rows(driver)
    assert len(rows) == 2, (rows, driver.find_element(By.ID, "status").text)
    assert "Question on line 3:" in rows[1] and "2,000" in rows[1]
    assert good in rows[0] and "Question on line" not in rows[0]
    assert driver.find_elements(By.CSS_SELECTOR, "#results > li:first-child button.result")
