"""``infer bench`` on the command line: a status line per length, then the table or the JSON.

``measure`` runs ``infer.bench.run_bench`` under a status spinner and keeps the lengths measured
before a Ctrl-C; ``show`` prints the rich table (``results_table``, titled with ``cache_label``)
on stdout, or the ``--json`` object (``infer.ui.records.bench_record``). The measuring itself is
engine-side, in ``infer/bench.py``.
"""

from __future__ import annotations

from rich import box
from rich.table import Table

from infer.bench import BenchResult, cache_dtype, run_bench
from infer.ui.console import UI
from infer.ui.records import bench_record
from models.dtypes import SHORT_NAMES


def cache_label(engine) -> str:
    """The KV cache as the table's title names it: ``"int8 cache"``, ``"bf16 cache"`` on CUDA,
    ``"float32 cache"`` on the CPU (``infer.bench.cache_dtype``)."""
    name = cache_dtype(engine)
    return f"{SHORT_NAMES.get(name, name)} cache"


def results_table(results: list[BenchResult], title: str) -> Table:
    """A ``rich.table.Table`` of the results, one row per length (units in the headers)."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE)
    for name in ("context", "TTFT s", "prefill tok/s", "decode tok/s", "ceiling tok/s",
                 "of ceiling"):
        table.add_column(name, justify="right")
    for r in results:
        ceiling = f"{r.ceiling_tokens_per_s:,.1f}" if r.ceiling_tokens_per_s else "-"
        frac = f"{100 * r.fraction_of_ceiling:.0f} %" if r.fraction_of_ceiling else "-"
        table.add_row(f"{r.prompt_tokens:,}", f"{r.ttft_s:.3f}", f"{r.prefill_tokens_per_s:,.0f}",
                      f"{r.decode_tokens_per_s:,.1f}", ceiling, frac)
    return table


def measure(ui: UI, engine, lengths: list[int], tokens: int) -> tuple[list[BenchResult], bool]:
    """Benchmark each length in turn. Returns ``(results, interrupted)``: a Ctrl-C stops the
    run, says so on stderr and keeps the lengths already measured."""
    results, runs = [], run_bench(engine, lengths, tokens)
    try:
        for n in lengths:
            with ui.status(f"{n:,} tokens: prefill, then {tokens} decode steps ..."):
                results.append(next(runs))
    except KeyboardInterrupt:
        ui.err.print("[yellow]interrupted[/]")
        return results, True
    return results, False


def show(ui: UI, engine, load_s: float, results: list[BenchResult], interrupted: bool) -> None:
    """The JSON object on stdout with ``--json``; else the table on stdout (if any length was
    measured)."""
    if ui.opts.json:
        ui.emit_json(bench_record(engine, load_s, results, interrupted))
    elif results:
        ui.out.print(results_table(results, f"{engine.config.model}: {cache_label(engine)}, "
                                            f"{engine.attention_kind} attention on "
                                            f"{engine.device}"))
