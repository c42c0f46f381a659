"""``infer bench`` on the command line: a status line per length, then the table or the JSON.

``measure`` runs ``infer.bench.run_bench`` under a status spinner and keeps the lengths measured
before a Ctrl-C; ``show`` prints the rich table (``results_table``, titled with ``cache_label``)
on stdout, or the ``--json`` object (``infer.ui.records.bench_record``). With ``--speculate`` the
table adds four columns (speculative tok/s, the speedup, drafts accepted / drafted, and whether
the tokens are the same as without speculation; the JSON also has the mean accepted per verify
step), and a length whose tokens differ is also named on stderr. The measuring itself is
engine-side, in ``infer/bench.py``.
"""

from __future__ import annotations

from rich import box
from rich.table import Table

from infer.bench import BenchResult, cache_dtype, run_bench
from infer.ui.console import UI
from infer.ui.records import bench_record
from infer.wording import counted
from models.dtypes import SHORT_NAMES


def cache_label(engine) -> str:
    """The KV cache as the table's title names it: ``"int8 cache"``, ``"bf16 cache"`` on CUDA,
    ``"float32 cache"`` on the CPU (``infer.bench.cache_dtype``)."""
    name = cache_dtype(engine)
    return f"{SHORT_NAMES.get(name, name)} cache"


def _spec_cells(r: BenchResult) -> list[str]:
    """The speculative columns of one row: tok/s, its fraction of the ceiling, speedup,
    accepted/drafted, same tokens."""
    if r.spec_decode_tokens_per_s is None:
        return ["-"] * 5
    frac = f"{100 * r.spec_fraction_of_ceiling:.0f} %" if r.spec_fraction_of_ceiling else "-"
    return [f"{r.spec_decode_tokens_per_s:,.1f}", frac, f"{r.speedup:.2f}x",
            f"{r.accepted:,}/{r.drafted:,}", "yes" if r.identical else "[bold red]NO[/]"]


def results_table(results: list[BenchResult], title: str) -> Table:
    """A ``rich.table.Table`` of the results, one row per length (units in the headers); the
    speculative columns when any result has them."""
    spec = any(r.spec_decode_tokens_per_s is not None for r in results)
    table = Table(title=title, title_justify="left", box=box.SIMPLE)
    names = ["context", "TTFT s", "prefill tok/s", "decode tok/s", "ceiling tok/s", "of ceiling"]
    if spec:
        names += ["spec tok/s", "spec of ceiling", "speedup", "accepted", "same"]
    for name in names:
        table.add_column(name, justify="right")
    for r in results:
        ceiling = f"{r.ceiling_tokens_per_s:,.1f}" if r.ceiling_tokens_per_s else "-"
        frac = f"{100 * r.fraction_of_ceiling:.0f} %" if r.fraction_of_ceiling else "-"
        table.add_row(f"{r.prompt_tokens:,}", f"{r.ttft_s:.3f}", f"{r.prefill_tokens_per_s:,.0f}",
                      f"{r.decode_tokens_per_s:,.1f}", ceiling, frac,
                      *(_spec_cells(r) if spec else ()))
    return table


def measure(ui: UI, engine, lengths: list[int], tokens: int, speculate: bool = False
            ) -> tuple[list[BenchResult], bool]:
    """Benchmark each length in turn (``speculate``: also with speculation, ``run_bench``).
    Returns ``(results, interrupted)``: a Ctrl-C stops the run, says so on stderr and keeps the
    lengths already measured."""
    ui.startup.began()
    results, runs = [], run_bench(engine, lengths, tokens, speculate=speculate)
    again = ", then again speculating" if speculate else ""
    try:
        for n in lengths:
            with ui.status(f"{counted(n, 'token')}: prefill, then "
                           f"{counted(tokens, 'decode step')}{again} ..."):
                results.append(next(runs))
    except KeyboardInterrupt:
        ui.err.print("[yellow]interrupted[/]")
        return results, True
    return results, False


def show(ui: UI, engine, load_s: float, results: list[BenchResult], interrupted: bool) -> None:
    """The JSON object on stdout with ``--json``; else the table on stdout (if any length was
    measured), and on the CPU a note on stderr of why the ceiling columns are empty. Either
    way, a length whose speculative tokens differ is named on stderr."""
    differ = [r.prompt_tokens for r in results if r.identical is False]
    if differ:
        ui.warn(f"speculation changed the greedy tokens at "
                f"{', '.join(f'{n:,}' for n in differ)} tokens of context")
    if ui.opts.json:
        ui.emit_json(bench_record(engine, load_s, results, interrupted))
    elif results:
        table = results_table(results, f"{engine.config.model}: {cache_label(engine)}, "
                                       f"{engine.attention_kind} attention on {engine.device}")
        print_unclipped(ui.out, table)
        if all(r.ceiling_tokens_per_s is None for r in results):
            ui.note(f"no ceiling on {engine.device.type}: it is a GPU's measured read "
                    "bandwidth over the bytes each decode step reads")


def print_unclipped(console, table: Table) -> None:
    """Print ``table`` at its natural width even where the console is narrower (a pipe is 80
    columns; the speculative table needs ~120), so that no number is cut to "…": the lines
    wrap on a narrow terminal instead."""
    need = console.measure(table, options=console.options.update(max_width=10_000)).maximum
    width = console.width
    if need > width:
        console.width = need
    try:
        console.print(table)
    finally:
        console.width = width
