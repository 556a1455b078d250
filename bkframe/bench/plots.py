"""The plots of ``bkframe bench sweep`` from its JSON: PNG files drawn with matplotlib's Agg
canvas (no display, no pyplot state). matplotlib is the optional extra ``bkframe[bench]``
(and in the dev group), imported only here."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.figure import Figure

TYPE_STYLE: dict[str, dict[str, Any]] = {
    "PD_JOURNAL": {"color": "tab:blue", "marker": "o"},
    "VD_JOURNAL": {"color": "tab:orange", "marker": "s"},
    "BYPASS_JOURNAL": {"color": "tab:green", "marker": "^"},
}
PEER_STYLE: dict[str, dict[str, Any]] = {
    "redis-always": {"color": "black", "marker": "x"},
    "nats-r3": {"color": "tab:gray", "marker": "+"},
}
FLOOR_STYLE: dict[str, dict[str, Any]] = {
    "echo": {"color": "tab:gray", "linestyle": "--"},
    "fsync": {"color": "black", "linestyle": ":"},
}
DPI = 110


def _plain_log(axis: Any) -> None:
    """Log-scale ticks at 1, 2, 3, 5 x 10^k written as plain numbers (0.5, 2, 100), not 5x10^-1."""
    axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:,g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def _label_size(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 and size % 1024 == 0 else f"{size} B"


def _cells(sweep: dict[str, Any], **match: Any) -> list[dict[str, Any]]:
    return [c for c in sweep["cells"] if all(c[k] == v for k, v in match.items())]


def _types(sweep: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(c["ledger_type"] for c in sweep["cells"]))


def _sizes(sweep: dict[str, Any]) -> list[int]:
    return sorted({c["entry_size"] for c in sweep["cells"]})


def _caption(fig: Figure, sweep: dict[str, Any]) -> None:
    commit = (sweep.get("commit") or "?")[:10] + (" (dirty)" if sweep.get("dirty") else "")
    fig.text(0.01, 0.005, f"{sweep['date']}  commit {commit}  {sweep['machine'].get('cpus')} cores; E=3 W=3 A=2",
             fontsize=7, color="dimgray")


def _save(fig: Figure, sweep: dict[str, Any], path: Path) -> Path:
    _caption(fig, sweep)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=DPI)
    return path


def plot_throughput(sweep: dict[str, Any], path: Path, window: int = 256) -> Path:
    """MB/s and entries/s by entry size, one line per ledger type at ``window``; the peers'
    figures from the same run as markers."""
    fig = Figure(figsize=(11, 4.5))
    axes: list[Axes] = list(fig.subplots(1, 2))
    for ax, key, peer_key, title in ((axes[0], "mb_per_s", "MB_per_s", "MB/s"),
                                     (axes[1], "entries_per_s", "records_per_s", "entries/s")):
        for ledger_type in _types(sweep):
            cells = sorted(_cells(sweep, ledger_type=ledger_type, window=window), key=lambda c: c["entry_size"])
            ax.plot([c["entry_size"] for c in cells], [c[key] for c in cells], label=f"bkframe {ledger_type}",
                    **TYPE_STYLE.get(ledger_type, {}))
        for system, style in PEER_STYLE.items():
            rows = [r for r in sweep["peers"]["results"] if r.get("system") == system and peer_key in r]
            if rows:
                ax.scatter([r["size"] for r in rows], [r[peer_key] for r in rows], s=80, zorder=3,
                           label=f"{system} (peer)", **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _plain_log(ax.yaxis)
        ax.set_xticks(_sizes(sweep), [_label_size(s) for s in _sizes(sweep)])
        ax.set_xlabel("entry size")
        ax.set_ylabel(title)
        ax.set_title(f"{title} at window {window}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    return _save(fig, sweep, path)


def _grid(sizes: list[int]) -> tuple[Figure, list[Axes]]:
    columns = min(2, len(sizes))
    rows = (len(sizes) + columns - 1) // columns
    fig = Figure(figsize=(5.5 * columns, 3.8 * rows))
    axes = fig.subplots(rows, columns, squeeze=False)
    flat: list[Axes] = [ax for row in axes for ax in row]
    for ax in flat[len(sizes):]:
        ax.set_visible(False)
    return fig, flat


def _size_panel(ax: Axes, size: int, xlabel: str, ylabel: str, *, legend: Literal["lower right", "upper left"]) -> None:
    """Labels, grid and legend of one entry size's panel of a :func:`_grid`."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{_label_size(size)} entries")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc=legend)


def plot_latency_cdf(sweep: dict[str, Any], path: Path) -> Path:
    """One panel per entry size: the latency CDF at window 1 of each ledger type, and the
    round-trip floors (bare, and with an fdatasync) of that size as vertical lines."""
    sizes = _sizes(sweep)
    fig, axes = _grid(sizes)
    for ax, size in zip(axes, sizes):
        for ledger_type in _types(sweep):
            for cell in _cells(sweep, ledger_type=ledger_type, window=1, entry_size=size):
                cdf = cell["latency_cdf_ms"]
                ax.plot(cdf, [i / (len(cdf) - 1) for i in range(len(cdf))], label=ledger_type,
                        color=TYPE_STYLE.get(ledger_type, {}).get("color"))
        for floor in sweep.get("floors", []):
            if floor["entry_size"] == size:
                ax.axvline(floor["p50_ms"], label=f"floor {floor['kind']} p50", **FLOOR_STYLE.get(floor["kind"], {}))
        ax.set_xscale("log")
        _plain_log(ax.xaxis)
        _size_panel(ax, size, "append latency, ms (window 1)", "fraction of appends", legend="lower right")
    return _save(fig, sweep, path)


def plot_latency_by_window(sweep: dict[str, Any], path: Path) -> Path:
    """One panel per entry size: p50 (solid) and p99 (dotted) latency by window, per ledger type."""
    sizes = _sizes(sweep)
    fig, axes = _grid(sizes)
    for ax, size in zip(axes, sizes):
        for ledger_type in _types(sweep):
            cells = sorted(_cells(sweep, ledger_type=ledger_type, entry_size=size), key=lambda c: c["window"])
            style = TYPE_STYLE.get(ledger_type, {})
            windows = [c["window"] for c in cells]
            ax.plot(windows, [c["p50_ms"] for c in cells], label=f"{ledger_type} p50", **style)
            ax.plot(windows, [c["p99_ms"] for c in cells], linestyle=":", alpha=0.6, color=style.get("color"))
        windows = sorted({c["window"] for c in sweep["cells"]})
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _plain_log(ax.yaxis)
        ax.set_xticks(windows, [str(w) for w in windows])
        _size_panel(ax, size, "appends in flight (window)", "latency, ms (p50 solid, p99 dotted)", legend="upper left")
    return _save(fig, sweep, path)


def write_plots(sweep: dict[str, Any], out_dir: Path) -> list[Path]:
    """Every plot of the sweep into ``out_dir``; the paths written."""
    window = max(c["window"] for c in sweep["cells"])
    return [
        plot_throughput(sweep, out_dir / f"throughput-window{window}.png", window=window),
        plot_latency_cdf(sweep, out_dir / "latency-cdf-window1.png"),
        plot_latency_by_window(sweep, out_dir / "latency-by-window.png"),
    ]
