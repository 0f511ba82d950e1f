"""Progress of long jobs: training's rich bar with loss and throughput, or, for a log file
(``--no-progress``), a log line every :data:`LINE_EVERY_S` seconds; silent on other processes.
:func:`counted` is the same for a job that only counts what it has done (scoring windows)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("structqa.training")

#: seconds between two progress lines when there is no bar
LINE_EVERY_S = 120.0


def elapsed_and_left(spent: float, done: int, left_to_do: int) -> str:
    """``41 min so far, about 1 h 22 min left``: the time left at the pace of ``done`` units in
    ``spent`` seconds (none while nothing is done here, or nothing is left)."""
    text = f"{format_duration(spent)} so far"
    if done > 0 and left_to_do > 0:
        text += f", about {format_duration(left_to_do * spent / done)} left"
    return text


def format_duration(seconds: float) -> str:
    """``41 min``, ``3 h 05 min``: a time a person reads at a glance."""
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


class Progress:
    """``mode``: ``"bar"`` (a rich progress bar), ``"lines"`` (log lines: step, share done,
    epoch, loss, throughput, time so far and left) or ``"off"``."""

    def __init__(self, total: int, mode: str, every_s: float = LINE_EVERY_S):
        if mode not in ("bar", "lines", "off"):
            raise ValueError(f"progress mode must be bar, lines or off, not {mode!r}")
        self.mode, self.total, self.every_s = mode, total, every_s
        self.step = 0
        self.started_at: int | None = None  # the step this process started from (resume)
        self.t0 = self.last_line = time.perf_counter()
        if mode == "bar":
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.p = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
            )
            self.task = self.p.add_task("train", total=total, info="")
            self.p.start()

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def advance(self, n: int) -> None:
        """Steps already done before this process started (a resumed run)."""
        self.step += n
        if self.mode == "bar" and n:
            self.p.update(self.task, advance=n)

    def update(self, loss: float, rate: float, epoch: int) -> None:
        """One more step done, at ``loss``, ``rate`` features a second, in ``epoch`` (0-based)."""
        if self.started_at is None:
            self.started_at, self.t0 = self.step, time.perf_counter()
        self.step += 1
        if self.mode == "bar":
            self.p.update(
                self.task, advance=1, info=f"epoch {epoch + 1} loss {loss:.3f} {rate:.1f} feat/s"
            )
        elif self.mode == "lines":
            now = time.perf_counter()
            if now - self.last_line >= self.every_s or self.step == self.total:
                self.last_line = now
                log.info("train: %s", self.line(loss, rate, epoch, now))

    def line(self, loss: float, rate: float, epoch: int, now: float) -> str:
        """``step 1200/3657 (32.8%), epoch 1, loss 0.539, 6.1 feat/s, 41 min so far, about
        1 h 22 min left`` (time left at this process's pace so far)."""
        done_here = self.step - (self.started_at or 0)
        spent = now - self.t0
        return (
            f"step {self.step}/{self.total} ({100 * self.step / max(self.total, 1):.1f}%), "
            f"epoch {epoch + 1}, loss {loss:.3f}, {rate:.1f} feat/s, "
            + elapsed_and_left(spent, done_here, self.total - self.step)
        )

    def note(self, text: str) -> None:
        if self.mode == "bar":
            self.p.console.log(text)
        elif self.mode == "lines":
            log.info("train: %s", text)

    def close(self) -> None:
        if self.mode == "bar":
            self.p.stop()


@contextmanager
def counted(total: int, mode: str, label: str, unit: str) -> Iterator[Callable[[int], None]]:
    """An ``advance(n)`` for a job of ``total`` ``unit``s: a rich bar (``mode`` "bar"), a log
    line every :data:`LINE_EVERY_S` seconds and at the end ("lines": ``label: 1,200/2,400
    windows (50.0%), 3 min so far, about 3 min left``) or nothing ("off")."""
    done = 0
    with tracked(mode, label, unit) as update:

        def advance(n: int) -> None:
            nonlocal done
            done += n
            update(done, total)

        yield advance


@contextmanager
def tracked(mode: str, label: str, unit: str) -> Iterator[Callable[[int, int], None]]:
    """As :func:`counted`, for a job that reports ``update(done, total)`` (its total known as
    it goes: chunks to embed once the files are read)."""
    if mode not in ("bar", "lines", "off"):
        raise ValueError(f"progress mode must be bar, lines or off, not {mode!r}")
    if mode == "bar":
        from rich.progress import Progress as Bar

        with Bar(transient=True) as bar:
            task = bar.add_task(f"{label} ({unit})", total=None)
            yield lambda done, total: bar.update(task, completed=done, total=total)
        return
    t0 = last = time.perf_counter()

    def update(done: int, total: int) -> None:
        nonlocal last
        now = time.perf_counter()
        if mode == "lines" and (now - last >= LINE_EVERY_S or done >= total):
            last = now
            share = f"{done:,}/{total:,} {unit} ({100 * done / max(total, 1):.1f}%), "
            log.info("%s: %s", label, share + elapsed_and_left(now - t0, done, total - done))

    yield update
