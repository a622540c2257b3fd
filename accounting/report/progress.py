"""A tiny progress bar on stderr, so long sweeps show they are alive.

On a terminal it redraws one line in place; elsewhere (a CI log, a pipe) it prints a
plain line at most every ``LOG_INTERVAL_S`` seconds, so logs stay short.

>>> import io
>>> stream = io.StringIO()
>>> bar = ProgressBar(total=10.0, stream=stream, width=10)
>>> bar.update(5.0, "float32 1024x1024x1024")
>>> bar.close()
>>> print(stream.getvalue().strip())
[#####.....]  50%  5.0/10 s  float32 1024x1024x1024
"""

import sys
import time

LOG_INTERVAL_S = 5.0
"""Least time between two lines when the stream is not a terminal."""

BAR_WIDTH = 30


class ProgressBar:
    """Progress toward ``total`` (seconds of budget, here), drawn on ``stream``.

    ``enabled=False`` makes every call a no-op (``--quiet``).
    """

    def __init__(self, total: float, *, stream=None, width: int = BAR_WIDTH, enabled: bool = True, clock=time.monotonic):
        self.total = max(float(total), 1e-9)
        self.stream = sys.stderr if stream is None else stream
        self.width = width
        self.enabled = enabled
        self.clock = clock
        self.interactive = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_line = ""
        self._last_print = None
        self._pending = ""

    def _render(self, done: float, text: str) -> str:
        fraction = min(max(done / self.total, 0.0), 1.0)
        filled = round(fraction * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        return f"[{bar}] {fraction:4.0%}  {done:.1f}/{self.total:.0f} s  {text}"

    def update(self, done: float, text: str = "") -> None:
        """Show ``done`` of ``total`` with a short note (what is being measured now)."""
        if not self.enabled:
            return
        line = self._render(done, text)
        if self.interactive:
            padding = " " * max(len(self._last_line) - len(line), 0)
            self.stream.write("\r" + line + padding)
            self.stream.flush()
            self._last_line = line
            return
        now = self.clock()
        if self._last_print is None or now - self._last_print >= LOG_INTERVAL_S:
            self.stream.write(line + "\n")
            self.stream.flush()
            self._last_print = now
            self._pending = ""
        else:
            self._pending = line

    def close(self) -> None:
        """Finish the bar: end the terminal line, or print the last unprinted log line."""
        if not self.enabled:
            return
        if self.interactive:
            if self._last_line:
                self.stream.write("\n")
        elif self._pending:
            self.stream.write(self._pending + "\n")
        self.stream.flush()
        self._pending = ""
        self._last_line = ""
