"""Readable terminal rendering of trajectories (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from toolorchestra.agent.trajectory import Trajectory


def print_trajectory(trajectory: Trajectory, console: Console | None = None) -> None:
    console = console or Console()
    console.print(Panel(Text(trajectory.task), title="task", subtitle=trajectory.preference or None))
    for turn in trajectory.turns:
        head = f"turn {turn.index}"
        if turn.tool:
            head += f" · {turn.tool}({turn.arguments})"
        head += f" · ${turn.cost_usd:.6f} · {turn.latency_s:.2f}s"
        style = "green" if turn.ok else "red"
        # Text, not markup: model output may contain [brackets] that rich would interpret.
        body = Text(turn.text or "(empty)")
        if turn.observation is not None:
            body.append(f"\n-> {turn.observation}", style="dim")
        console.print(Panel(body, title=head, border_style=style, title_align="left"))
    summary = Table(show_header=False, box=None)
    summary.add_row("answer", str(trajectory.answer))
    summary.add_row("stopped", str(trajectory.stop_reason) + (f" ({trajectory.error})" if trajectory.error else ""))
    summary.add_row("cost", f"${trajectory.cost_usd:.6f}")
    summary.add_row("latency", f"{trajectory.latency_s:.2f}s")
    summary.add_row("tokens", ", ".join(f"{k}: {v.prompt_tokens}+{v.completion_tokens}" for k, v in trajectory.tokens.items()))
    console.print(summary)
