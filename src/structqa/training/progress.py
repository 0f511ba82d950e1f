"""The training progress bar: steps, loss and throughput (rich), silent when disabled."""

from __future__ import annotations


class Progress:
    """A rich progress bar with loss and throughput (silent when disabled)."""

    def __init__(self, total: int, enabled: bool):
        self.enabled = enabled
        if enabled:
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

    def advance(self, n: int) -> None:
        if self.enabled and n:
            self.p.update(self.task, advance=n)

    def update(self, loss: float, rate: float, epoch: int) -> None:
        if self.enabled:
            self.p.update(
                self.task, advance=1, info=f"epoch {epoch + 1} loss {loss:.3f} {rate:.1f} feat/s"
            )

    def note(self, text: str) -> None:
        if self.enabled:
            self.p.console.log(text)

    def close(self) -> None:
        if self.enabled:
            self.p.stop()
