#!/usr/bin/env python3
"""Writes docs/results.md and its pictures (docs/results/*.svg) from what the benchmarks left
under out/bench/ (bench/all.sh runs them first). Plain Python, no plotting library: the plots
are small hand-made SVGs. A section whose benchmark did not run says so instead of a figure;
with --update it keeps that section of the existing docs/results.md instead (and the notes)."""
import csv
import datetime
import glob
import re
import html
import json
import math
import os
import platform
import shutil
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "out", "bench")
DOCS = os.path.join(ROOT, "docs")
PICS = os.path.join(DOCS, "results")

NAMES = {"vgg16": "VGG-16", "resnet50": "ResNet-50", "gnmt16": "GNMT-16", "awd-lm": "AWD LM"}
# PipeDream (SOSP 2019), Table 1, Cluster A (V100s; PCIe in a server, 10 Gbit/s between servers):
# speed-up of PipeDream's epoch time over data parallelism.
PAPER = [("vgg16", "4x4", "15-1", 5.28), ("resnet50", "4x4", "16", 1.0), ("gnmt16", "1x4", "straight", 1.46),
         ("gnmt16", "4x4", "straight", 2.34), ("awd-lm", "1x4", "straight", 4.25)]
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]


# ---------------------------------------------------------------- inputs

def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def emulated_runs():
    """One entry per bench/emulated_cluster.sh run: its rows (dicts) and its directory."""
    runs = []
    for path in sorted(glob.glob(os.path.join(OUT, "emulated_cluster", "*", "rows.csv"))):
        rows = read_csv(path)
        if rows:
            name = os.path.basename(os.path.dirname(path))
            scale = re.search(r"-s([0-9.]+)(-calibrated)?$", name)
            runs.append({"dir": os.path.dirname(path), "rows": rows, "gbps": rows[0]["gbps"],
                         "model": rows[0]["model"], "cluster": rows[0]["cluster"],
                         "hierarchical": "-hierarchical" in name, "time_scale": float(scale.group(1)) if scale else 2.0,
                         "own_plan": "-plan-" in name})
    return runs


def workers_of(r):
    """A row's data-parallel worker count: its config, "16" or "16 hierarchical"."""
    return int(r["config"].split()[0])


def row(run, schedule):
    return next((r for r in run["rows"] if r["schedule"] == schedule), None)


def speedup(run, schedule="pipedream"):
    a, d = row(run, schedule), row(run, "dp")
    if not a or not d:
        return None
    return float(a["samples_per_s"]) / float(d["samples_per_s"])


def steady_speedup(run, schedule="pipedream"):
    """The same ratio between the steady states (fill and drain left out): data parallelism's
    steady time is per step of one minibatch per worker."""
    a, d = row(run, schedule), row(run, "dp")
    try:
        return float(d["steady_measured_ms"]) / workers_of(d) / float(a["steady_measured_ms"])
    except (TypeError, KeyError, ValueError, ZeroDivisionError):
        return None


def default_run(runs, model, cluster):
    """The run at the cluster's own bandwidth (not a sweep point), with the planner's plan and a ring
    all-reduce: one with a pipedream row, at the smallest time scale (bench/emulated_all.sh runs
    some 16-worker rows at x 8, where x 2 needs more than the machine's cores)."""
    own = {"4x4": "96 10", "1x4": "96", "flat4": "10", "flat8": "10"}.get(cluster)
    fits = [r for r in runs if r["model"] == model and r["cluster"] == cluster and r["gbps"] == own
            and not r["hierarchical"] and not r["own_plan"]]
    fits.sort(key=lambda r: (row(r, "pipedream") is None, r["time_scale"]))
    if not fits:
        return None
    # Data parallelism from another run of the same setting where this one has none (emulated_all.sh
    # runs GNMT-16's 4x4 pipedream at x 16 and its dp at x 8; rows are in the emulated cluster's
    # units, whatever the scale): Table 1 printed its speed-up "not run".
    chosen = fits[0]
    if row(chosen, "dp") is None:
        other = next((r for r in fits[1:] if row(r, "dp") is not None), None)
        if other is not None:
            chosen = dict(chosen, rows=chosen["rows"] + [row(other, "dp")])
    return chosen


CLUSTER_WORKERS = {"4x4": 16, "1x4": 4, "flat4": 4, "flat8": 8, "2x8": 16, "8x2": 16}


def limit_share(r):
    """The row's steady throughput as a share of the physical limit: every worker of the cluster
    computing all the time, one worker's forward and backward of a sample and its share of an
    optimizer step (data/profiles, a step per minibatch) split among them. Over 1 it cannot be true (the emulated compute is a wait of at least the
    profile's time), so it is a defect of the emulation or the metrics; None if unknown."""
    try:
        prof = json.load(open(os.path.join(ROOT, "data", "profiles", r["model"] + ".json")))
        ms_per_sample = sum(l["forward_ms"] + l["backward_ms"] + l.get("optimizer_ms", 0)
                            for l in prof["layers"]) / prof["batch_size"]
        workers = CLUSTER_WORKERS.get(r["cluster"]) or int(r["cluster"].lstrip("flat"))
        samples = prof["batch_size"] * (workers_of(r) if r["schedule"] == "dp" else 1)
        return samples / float(r["steady_measured_ms"]) / (workers / ms_per_sample)
    except (OSError, KeyError, ValueError, ZeroDivisionError):
        return None


def trace_breakdown(path):
    """Per stage, the mean share of a worker's span in compute (F/B/W), all-reduce, and the rest
    (waiting for data): what a simulated run spends its time on."""
    t = json.load(open(path))
    by_stage = {}
    for events in t["workers"]:
        if not events:
            continue
        span = max(e["end_ms"] for e in events) - min(e["start_ms"] for e in events)
        comp = ar = 0.0
        stage = None
        for e in events:
            a = e["action"]
            code = "".join(c for c in a.split(">")[0].split("<")[0] if c.isalpha())
            d = e["end_ms"] - e["start_ms"]
            if code in ("F", "B", "W"):
                comp += d
                stage = int(a[:len(a) - len(a.lstrip("0123456789"))])
            elif code == "AR":
                ar += d
        if stage is None or span <= 0:
            continue
        by_stage.setdefault(stage, []).append((comp / span, ar / span))
    return {s: (statistics.mean(c for c, _ in v), statistics.mean(a for _, a in v), len(v))
            for s, v in sorted(by_stage.items())}


# ---------------------------------------------------------------- pictures

def svg_frame(width, height, title):
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="sans-serif" font-size="12">',
            f'<rect width="{width}" height="{height}" fill="white"/>',
            f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14">{html.escape(title)}</text>']


def nice_max(v):
    if v <= 0:
        return 1
    e = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if m * e >= v:
            return m * e
    return 10 * e


def legend(out, names, x, y):
    for i, n in enumerate(names):
        out.append(f'<rect x="{x}" y="{y + 16 * i - 9}" width="10" height="10" fill="{COLORS[i % len(COLORS)]}"/>')
        out.append(f'<text x="{x + 14}" y="{y + 16 * i}">{html.escape(n)}</text>')


def bar_chart(path, title, groups, series, ylabel):
    """groups: [(label, [value or None per series])]."""
    W, H, L, R, T, B = 720, 360, 60, 160, 30, 50
    top = nice_max(max((v for _, vs in groups for v in vs if v is not None), default=1))
    out = svg_frame(W, H, title)
    ph, pw = H - T - B, W - L - R
    for k in range(6):
        y = T + ph - ph * k / 5
        out.append(f'<line x1="{L}" x2="{L + pw}" y1="{y}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{y + 4}" text-anchor="end">{top * k / 5:g}</text>')
    out.append(f'<text transform="translate(16,{T + ph / 2}) rotate(-90)" text-anchor="middle">{html.escape(ylabel)}</text>')
    gw = pw / max(1, len(groups))
    bw = gw * 0.8 / max(1, len(series))
    for g, (label, vals) in enumerate(groups):
        x0 = L + g * gw + gw * 0.1
        for s, v in enumerate(vals):
            if v is None:
                continue
            h = ph * v / top
            out.append(f'<rect x="{x0 + s * bw:.1f}" y="{T + ph - h:.1f}" width="{bw * 0.9:.1f}" height="{h:.1f}" '
                       f'fill="{COLORS[s % len(COLORS)]}"><title>{html.escape(label)}: {v:.2f}</title></rect>')
            out.append(f'<text x="{x0 + s * bw + bw * 0.45:.1f}" y="{T + ph - h - 3:.1f}" text-anchor="middle" '
                       f'font-size="10">{v:.2f}</text>')
        out.append(f'<text x="{L + g * gw + gw / 2:.1f}" y="{T + ph + 16}" text-anchor="middle">{html.escape(label)}</text>')
    legend(out, series, L + pw + 12, T + 14)
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


def line_chart(path, title, series, xlabel, ylabel, logx=True, y_lo=0):
    """series: [(name, [(x, y, point label)])]; x on a log scale unless logx is False; the y axis
    from y_lo."""
    W, H, L, R, T, B = 720, 360, 70, 160, 30, 50
    xs = [p[0] for _, pts in series for p in pts]
    ys = [p[1] for _, pts in series for p in pts]
    if not xs:
        return
    fx = (lambda v: math.log10(v)) if logx else (lambda v: v)
    x_lo, x_hi = fx(min(xs)), fx(max(xs))
    x_hi = x_hi if x_hi > x_lo else x_lo + 1
    top = nice_max(max(ys))
    ph, pw = H - T - B, W - L - R
    px = lambda v: L + (fx(v) - x_lo) / (x_hi - x_lo) * pw
    py = lambda v: T + ph - ph * (v - y_lo) / (top - y_lo)
    out = svg_frame(W, H, title)
    for k in range(6):
        y = T + ph - ph * k / 5
        out.append(f'<line x1="{L}" x2="{L + pw}" y1="{y}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{y + 4}" text-anchor="end">{y_lo + (top - y_lo) * k / 5:g}</text>')
    ticks = sorted(set(xs)) if logx else [min(xs) + (max(xs) - min(xs)) * k / 5 for k in range(6)]
    for v in ticks:
        out.append(f'<text x="{px(v):.1f}" y="{T + ph + 16}" text-anchor="middle">{v:.3g}</text>')
    out.append(f'<text x="{L + pw / 2}" y="{H - 10}" text-anchor="middle">{html.escape(xlabel)}</text>')
    out.append(f'<text transform="translate(16,{T + ph / 2}) rotate(-90)" text-anchor="middle">{html.escape(ylabel)}</text>')
    for i, (name, pts) in enumerate(series):
        pts = sorted(pts)
        c = COLORS[i % len(COLORS)]
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
                   % (c, " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _ in pts)))
        for x, y, lab in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{c}"><title>{html.escape(name)} '
                       f'{x:g}: {y:.0f}</title></circle>')
            if lab:
                out.append(f'<text x="{px(x):.1f}" y="{py(y) - 7:.1f}" text-anchor="middle" font-size="10">'
                           f'{html.escape(lab)}</text>')
    legend(out, [n for n, _ in series], L + pw + 12, T + 14)
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


def scatter_chart(path, title, points, xlabel, ylabel):
    """points: [(x, y, series)]; the diagonal y = x is a perfect prediction."""
    W, H, L, R, T, B = 560, 420, 70, 150, 30, 50
    top = nice_max(max(max(x, y) for x, y, _ in points))
    lo = min(min(x, y) for x, y, _ in points)
    lo = 10 ** math.floor(math.log10(max(lo, 1e-3)))
    ph, pw = H - T - B, W - L - R
    f = lambda v: (math.log10(v) - math.log10(lo)) / (math.log10(top) - math.log10(lo))
    px = lambda v: L + f(v) * pw
    py = lambda v: T + ph - f(v) * ph
    out = svg_frame(W, H, title)
    d = lo
    while d <= top * 1.001:
        out.append(f'<line x1="{px(d):.1f}" x2="{px(d):.1f}" y1="{T}" y2="{T + ph}" stroke="#eee"/>')
        out.append(f'<line x1="{L}" x2="{L + pw}" y1="{py(d):.1f}" y2="{py(d):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{px(d):.1f}" y="{T + ph + 16}" text-anchor="middle">{d:g}</text>')
        out.append(f'<text x="{L - 6}" y="{py(d) + 4:.1f}" text-anchor="end">{d:g}</text>')
        d *= 10
    out.append(f'<line x1="{px(lo):.1f}" y1="{py(lo):.1f}" x2="{px(top):.1f}" y2="{py(top):.1f}" stroke="#888" '
               f'stroke-dasharray="4,3"/>')
    out.append(f'<text x="{L + pw / 2}" y="{H - 10}" text-anchor="middle">{html.escape(xlabel)}</text>')
    out.append(f'<text transform="translate(16,{T + ph / 2}) rotate(-90)" text-anchor="middle">{html.escape(ylabel)}</text>')
    names = sorted({s for _, _, s in points})
    for x, y, s in points:
        c = COLORS[names.index(s) % len(COLORS)]
        out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{c}" fill-opacity="0.8">'
                   f'<title>{html.escape(s)}: simulated {x:.1f}, measured {y:.1f}</title></circle>')
    legend(out, names, L + pw + 12, T + 14)
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


# ---------------------------------------------------------------- sections

def machine():
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), Linux {platform.release()}, no accelerator"


def measured_on(path):
    """When the benchmark wrote `path` (a file, or the newest file under a folder): each section
    says when its figures were measured, since --update keeps the sections of older runs."""
    times = [os.path.getmtime(path)]
    for folder, _, files in os.walk(path) if os.path.isdir(path) else []:
        times += [os.path.getmtime(os.path.join(folder, f)) for f in files]
    return f"*Measured {datetime.date.fromtimestamp(max(times))}.*\n"


def dated(md, add, path):
    """Runs `add`, which appends a section, and puts when `path` was measured under its heading."""
    at = len(md)
    result = add()
    if runs_exist(path) and len(md) > at + 1 and md[at + 1] != "(not run)\n":
        md.insert(at + 1, measured_on(path))
    return result


def runs_exist(path):
    return os.path.isdir(path) and any(files for _, _, files in os.walk(path))


def section_head(md, title, path):
    """The section's title; False, after saying so, when its benchmark left no `path`."""
    md.append(f"## {title}\n")
    if not os.path.exists(path):
        md.append("(not run)\n")
        return False
    md.append(measured_on(path))
    return True


def section_table1(runs, md):
    md.append("## PipeDream against data parallelism, beside the paper's Table 1 (emulated)\n")
    # Marked so that --update keeps (or leaves out) the section: a table of "not run" rows was
    # appended to docs/results.md after one other benchmark's run.
    if not any(default_run(runs, model, cluster) for model, cluster, _, _ in PAPER):
        md.append("(not run)\n")
        return
    groups, table = [], []
    for model, cluster, paper_cfg, paper in PAPER:
        run = default_run(runs, model, cluster)
        s = speedup(run) if run else None
        st = steady_speedup(run) if run else None
        cfg = row(run, "pipedream")["config"] if run and row(run, "pipedream") else "-"
        pred = row(run, "pipedream")["planner_speedup"] if run and row(run, "pipedream") else ""
        table.append(f"| {NAMES[model]} | {cluster} | {paper_cfg} | {paper:.2f}x | {cfg} | "
                     f"{(pred + 'x') if pred else '-'} | {('%.2fx' % s) if s else 'not run'} | "
                     f"{('%.2fx' % st) if st else '-'} |")
        groups.append((f"{NAMES[model]} {cluster}", [paper, s]))
    md.append("| model | cluster | paper's config | paper's speed-up | our planner's config | "
              "planner predicts | measured here, whole run (emulated) | measured, steady state |")
    md.append("|---|---|---|---|---|---|---|---|")
    md.extend(table)
    # A chart of the paper's bars alone, under a legend naming ours, said nothing measured.
    if any(measured for _, (_, measured) in groups):
        bar_chart(os.path.join(PICS, "speedup_vs_paper.svg"), "PipeDream speed-up over data parallelism",
                  groups, ["paper (V100, Table 1)", "pipetrain (emulated)"], "x over DP")
        md.append("\n![speed-up over DP](results/speedup_vs_paper.svg)\n")
    md.append("Speed-up is PipeDream's throughput over data parallelism's, on the same emulated cluster. "
              "The paper's column is its epoch-time speed-up. Our planner picks its own configuration "
              "from our profiles (data/profiles/), so configurations can differ from the paper's. "
              "The whole run includes the pipeline's fill and drain over the bench's few minibatches; "
              "the steady state leaves them out, as a long training run does (metrics.h).\n")


def section_hierarchical(runs, md):
    """Data parallelism all-reducing hierarchically beside the ring, at one time scale."""
    md.append("## Data parallelism with a hierarchical all-reduce (emulated)\n")
    lines = []
    for h in (r for r in runs if r["hierarchical"]):
        ring = next((r for r in runs if not r["hierarchical"] and not r["own_plan"] and r["model"] == h["model"]
                     and r["cluster"] == h["cluster"] and r["gbps"] == h["gbps"] and r["time_scale"] == h["time_scale"]
                     and row(r, "dp")), None)
        pd, dh, dr = row(h, "pipedream"), row(h, "dp"), row(ring, "dp") if ring else None
        if not (pd and dh and dr):
            continue
        per = lambda d, key: float(d[key]) / workers_of(d)
        lines.append(f"| {NAMES.get(h['model'], h['model'])} | {h['cluster']} | {h['gbps'].replace(' ', ', ')} | "
                     f"{h['time_scale']:g} | {pd['config'].split()[0]} | {float(pd['steady_measured_ms']):.2f} | "
                     f"{per(dr, 'steady_measured_ms'):.2f} | {per(dh, 'steady_measured_ms'):.2f} | "
                     f"{per(dr, 'steady_measured_ms') / float(pd['steady_measured_ms']):.2f}x | "
                     f"{per(dh, 'steady_measured_ms') / float(pd['steady_measured_ms']):.2f}x | "
                     f"{per(dr, 'steady_sim_ms') / float(pd['steady_sim_ms']):.2f}x | "
                     f"{per(dh, 'steady_sim_ms') / float(pd['steady_sim_ms']):.2f}x |")
    if not lines:
        md.append("(not run)\n")
        return
    md.append("Steady-state ms per minibatch of the profile's batch (data parallelism: its time per step "
              "over its workers), and PipeDream's speed-up over each data parallelism, measured and "
              "simulated. The workers, the planner and the simulator all-reduce inside each server, then "
              "a shard each across servers (docs/planner.md).\n")
    md.append("| model | cluster | Gbit/s | time x | pipedream plan | pipedream ms | dp ring ms | dp hierarchical ms | "
              "over ring dp | over hierarchical dp | simulated, over ring | simulated, over hierarchical |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    md.extend(lines)
    md.append("")


def section_schedules(runs, md):
    run = default_run(runs, "vgg16", "4x4")
    md.append("## Every schedule on the emulated 4x4 cluster: VGG-16 (emulated)\n")
    if not run:
        md.append("(not run)\n")
        return
    md.append("| schedule | config | steps | measured ms/minibatch | simulated ms/minibatch | error | samples/s | vs dp |")
    md.append("|---|---|---|---|---|---|---|---|")
    dp = row(run, "dp")
    for r in run["rows"]:
        vs = float(r["samples_per_s"]) / float(dp["samples_per_s"]) if dp else None
        mb = " (1024 samples)" if r["schedule"] == "dp" else ""
        md.append(f"| {r['schedule']} | {r['config']} | {r['steps']} | {r['measured_ms']}{mb} | {r['sim_ms']} | "
                  f"{r['error_pct']}% | {r['samples_per_s']} | {('%.2fx' % vs) if vs else '-'} |")
    md.append("")
    for kind in ("pipedream",):
        for suffix, what in ((".svg", "measured"), (".sim.svg", "simulated")):
            src = os.path.join(run["dir"], kind + suffix)
            if os.path.exists(src):
                name = f"vgg16_4x4_{kind}_{what}.svg"
                shutil.copy(src, os.path.join(PICS, name))
                md.append(f"![{kind} {what}](results/{name})\n")
        sim = os.path.join(run["dir"], kind + ".sim.json")
        if os.path.exists(sim):
            s = trace_breakdown(sim)
            md.append(f"Where {kind}'s workers spend their time in the simulator, per stage (mean over its "
                      "replicas; share of each worker's span from its first to its last action). The measured "
                      "trace cannot be split this way: a measured F or B spans its wait for its input too.\n")
            md.append("| stage | replicas | compute | all-reduce | idle (waiting for data) |")
            md.append("|---|---|---|---|---|")
            for st, (sc, sa, n) in s.items():
                md.append(f"| {st} | {n} | {sc:.0%} | {sa:.0%} | {max(0.0, 1 - sc - sa):.0%} |")
            md.append("")


def section_sim_error(runs, md):
    md.append("## Simulator against measurement (emulated)\n")
    pts, lines, spreads, impossible = [], [], [], []
    for run in runs:
        for r in run["rows"]:
            share = limit_share(r)
            if share is not None and share > 1:
                impossible.append(f"{r['model']} {r['cluster']} {r['gbps']} {r['schedule']} {r['config']}: "
                                  f"{share:.1%} of the compute limit")
            pts.append((float(r["sim_ms"]), float(r["measured_ms"]), r["schedule"]))
            # Like with like: the prediction is a steady state, so it stands beside the steady
            # simulation and measurement; the spread is the largest of the three over the least.
            steady = [float(v) for v in (r.get("predicted_ms"), r.get("steady_sim_ms"), r.get("steady_measured_ms"))
                      if v not in (None, "", "-", "n/a")]
            spread = max(steady) / min(steady) - 1 if len(steady) >= 2 and min(steady) > 0 else None
            if spread is not None:
                spreads.append(spread)
            lines.append(f"| {NAMES.get(r['model'], r['model'])} | {r['cluster']} | {r['gbps'].replace(' ', ', ')} | "
                         f"{r['schedule']} | {r['config']}{'' if run['time_scale'] == 2 else ', time x %g' % run['time_scale']} | "
                         f"{r.get('predicted_ms') or '-'} | {r['sim_ms']} | "
                         f"{r['measured_ms']} | {r['error_pct']}% | {r.get('steady_sim_ms') or '-'} | "
                         f"{r.get('steady_measured_ms') or '-'} | {('%.1f%%' % (100 * spread)) if spread is not None else '-'} | "
                         f"{('%.1f%%' % (100 * share)) if share is not None else '-'} |")
    if not pts:
        md.append("(not run)\n")
        return impossible
    errs = [abs(m - s) / s for s, m, _ in pts]
    scatter_chart(os.path.join(PICS, "sim_vs_measured.svg"), "time per minibatch: simulated vs measured (ms)", pts,
                  "simulated ms per minibatch", "measured ms per minibatch")
    md.append(f"Every emulated row ({len(pts)}): the simulator's time per minibatch for the same plan, schedule and "
              f"minibatches against the testbed's. Median absolute error {statistics.median(errs):.0%}, "
              f"largest {max(errs):.0%}; {sum(e <= 0.2 for e in errs)} of {len(errs)} rows within 20%. "
              f"In the steady state, prediction (where the planner makes one), simulation and measurement are within "
              f"10% of each other in {sum(x <= 0.1 for x in spreads)} of {len(spreads)} rows (largest spread "
              f"{max(spreads, default=0):.1%}); docs/results_notes.md gives the cause of each row beyond.\n")
    md.append("![simulated vs measured](results/sim_vs_measured.svg)\n")
    md.append("Predicted: the planner's steady-state time for its plan under pipedream (dp: its data-parallel "
              "figure x workers); simulated and measured: whole runs over the same minibatches, warm-up included; "
              "steady: the middle third of the minibatches in whole periods of the replica rounds (metrics.h), "
              "simulated and measured from the workers' merged traces; spread: the largest of the steady three over the "
              "least. Since issue 32 the planner's prediction is its simulation of the plan (earlier rows "
              "of pipedream and dp were its closed form).\n")
    md.append("Of the limit: the measured steady throughput as a share of the physical limit, every worker of the "
              "cluster computing all the time (one worker's forward and backward per sample, from data/profiles, "
              "over the cluster's workers). It cannot pass 100%; the report says so if a row does.\n")
    if impossible:
        md.append("**Figures that cannot be true** (over the physical limit; a defect to find before trusting any "
                  "row): " + "; ".join(impossible) + ".\n")
    md.append("| model | cluster | Gbit/s | schedule | config | predicted ms | simulated ms | measured ms | error | "
              "steady sim ms | steady measured ms | steady spread | of the limit |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    md.extend(lines)
    md.append("")
    return impossible


def section_sweep(runs, md):
    sweep = sorted((r for r in runs if r["model"] == "vgg16" and r["cluster"] == "flat4"), key=lambda r: float(r["gbps"]))
    md.append("## Throughput as the bandwidth drops: VGG-16 on 4 workers (emulated)\n")
    if len(sweep) < 2:
        md.append("(not run)\n")
        return
    series = {"pipedream": [], "dp": []}
    md.append("| emulated Gbit/s | testbed link | planner config | pipedream samples/s | dp samples/s | speed-up | planner predicts |")
    md.append("|---|---|---|---|---|---|---|")
    for run in sweep:
        p, d = row(run, "pipedream"), row(run, "dp")
        g = float(run["gbps"])
        if p:
            series["pipedream"].append((g, float(p["samples_per_s"]), p["config"]))
        if d:
            series["dp"].append((g, float(d["samples_per_s"]), ""))
        s = speedup(run)
        md.append(f"| {g:g} | {(p or d)['link_rate']} | {p['config'] if p else '-'} | {p['samples_per_s'] if p else '-'} | "
                  f"{d['samples_per_s'] if d else '-'} | {('%.2fx' % s) if s else '-'} | "
                  f"{(p['planner_speedup'] + 'x') if p else '-'} |")
    line_chart(os.path.join(PICS, "bandwidth_sweep.svg"), "VGG-16, 4 workers: throughput vs bandwidth",
               list(series.items()), "emulated Gbit/s per worker link (testbed: / 100)", "samples/s (emulated)")
    md.append("\n![bandwidth sweep](results/bandwidth_sweep.svg)\n")
    md.append("Labels on the PipeDream line are the planner's configuration at that bandwidth.\n")


def section_efficiency(md):
    path = os.path.join(OUT, "efficiency", "summary.csv")
    if not section_head(md, "Runtime efficiency: a balanced 8-stage pipeline (emulated compute, threads)", path):
        return
    md.append("8 stages of 10 ms forward and 20 ms backward per minibatch of 64, pipedream, 80 minibatches; the "
              "ideal is one minibatch per 30 ms in steady state, the simulator's total includes fill and drain (so the "
              "measured run, fill and drain included, reaches at most 2400 / 2611 = 91.9% of the ideal rate). "
              "The simulator replays each run with the profile `pipetrain profile --compute emulated` measured of "
              "the emulated model at that size: the runtime's own work (gradient accumulation, the optimizer step "
              "and its stash copy) included; beside it, the simulation of the unmeasured profile.\n")
    md.append("| weights per stage | measured ms | simulated ms | of the simulated rate | of the ideal rate | "
              "simulated without the runtime's work |")
    md.append("|---|---|---|---|---|---|")
    for r in read_csv(path):
        md.append(f"| {int(float(r['weights_per_stage_bytes'])) // 1024} KiB | {r['measured_ms']} | {r['sim_ms']} | "
                  f"{r['pct_of_sim']}% | {r['pct_of_ideal']}% | {r.get('sim_unmeasured_ms', '')} |")
    src = os.path.join(OUT, "efficiency", "measured.svg")
    if os.path.exists(src):
        shutil.copy(src, os.path.join(PICS, "balanced8_measured.svg"))
        md.append("\n![balanced 8-stage, measured](results/balanced8_measured.svg)\n")
    md.append("")


def section_real_cpu(md):
    path = os.path.join(OUT, "real_cpu", "summary.csv")
    if not section_head(md, "Real CPU: mnist-cnn on Fashion-MNIST, 2 workers on 2 cores (measured, not emulated)", path):
        return
    rows = read_csv(path)
    # The single worker's, not the first row's: where it failed, dp's was the base of "vs single".
    base = next((float(r["samples_per_s"]) for r in rows if r["run"] == "single"), None)
    target = rows[0]["target"] if rows else "0.88"
    md.append(f"| run | samples/s | vs single | training seconds to {float(target):.0%} | final test accuracy |")
    md.append("|---|---|---|---|---|")
    series = []
    for r in rows:
        vs = f"{float(r['samples_per_s']) / base:.2f}x" if base else "-"
        md.append(f"| {r['run']} | {r['samples_per_s']} | {vs} | {r['seconds_to_target']} | "
                  f"{float(r['final_accuracy']):.2%} |")
        pts = [(float(x["train_s"]), 100 * float(x["test_accuracy"]), "")
               for x in read_csv(os.path.join(OUT, "real_cpu", r["run"] + ".csv")) if x["test_accuracy"]]
        series.append((r["run"], [p for p in pts if p[0] > 0]))
    # From 60% where every evaluation reads above it; lower where one does not (it was drawn off the picture).
    lowest = min((p[1] for _, pts in series for p in pts), default=60)
    line_chart(os.path.join(PICS, "time_to_accuracy.svg"), "mnist-cnn: test accuracy over training time",
               series, "training seconds (evaluations excluded)", "test accuracy %", logx=False,
               y_lo=min(60, 10 * math.floor(lowest / 10)))
    md.append("\n![time to accuracy](results/time_to_accuracy.svg)\n")
    extra = os.path.join(OUT, "real_cpu", "runtime_throughput.txt")
    if os.path.exists(extra):
        md.append("`build/bench/bench_runtime_throughput 300`: pipedream and dp as above, over 300 minibatches of "
                  "64, side by side, against a plain single-worker loop that no command runs (its \"single worker\" "
                  "row: `train` on one worker is the 1-stage pipeline of the last row), and the runtime's per-action "
                  "overhead (that pipeline against the plain loop):\n")
        md.append("```\n" + open(extra).read().strip() + "\n```\n")
    # The run's own settings (a summary of before they were recorded: real_cpu.sh's defaults).
    epochs, every = (rows[0].get("epochs") or "2", rows[0].get("eval_every") or "200") if rows else ("2", "200")
    md.append(f"Batch 32, SGD lr 0.02 with momentum 0.9, cosine schedule with 200 warm-up steps, {epochs} epochs; "
              "dp splits each minibatch over 2 workers; pipedream runs 2 stages split by a measured profile. "
              f"Test accuracy is measured every {every} minibatches (the pipelines drain there).\n")


def section_plan_speed(md):
    md.append("## Planning speed: `pipetrain plan` end to end (measured)\n")
    path = os.path.join(OUT, "plan_speed.txt")
    if not os.path.exists(path):
        md.append("(not run)\n")  # the mark update_sections keeps the section's old figures by
        return
    text = open(path).read()
    end = text[text.find("end to end"):] if "end to end" in text else ""
    md.append(measured_on(path))
    md.append("`build/bench/bench_plan_speed`: each `pipetrain plan` is a new process (start included) on one "
              "of PipeDream's 13 published profiles (../shared/data/pipedream-profiles) and a cluster (4, 8, 16 "
              "workers flat at 10 Gbit/s, 4x4 at 100/10), under the default cost model (pt) and PipeDream's "
              "(pd, `--cost-model pipedream`), median of 5 runs. The front end links no LibTorch; "
              "`pipetrain-torch --help` beside it shows what loading LibTorch costs a process. Under the "
              "default model `plan` also replays its 12 best candidates in the simulator (docs/planner.md), "
              "which is most of its time.\n")
    md.append("```\n" + end.strip() + "\n```\n")


def section_text(md, title, filename, how):
    """A benchmark's printed summary (out/bench/<filename>), under `how` it was measured."""
    md.append(f"## {title}\n")
    path = os.path.join(OUT, filename)
    if not os.path.exists(path):
        md.append("(not run)\n")
        return
    md.append(measured_on(path))
    md.append(how + "\n")
    md.append("```\n" + open(path).read().strip() + "\n```\n")


def section_peers(md):
    section_text(md, "pipetrain against what users run instead: plain LibTorch, PyTorch DDP, GPipe (measured)",
                 "peers.txt",
                 "`bench/runtime_vs_peers.sh`: mnist-cnn on Fashion-MNIST, a minibatch of 64 per step in every run "
                 "(data parallelism splits it over 2 workers, as DDP's global batch of 64 does), one compute thread "
                 "per worker on this machine's 2 cores; rounds interleaved, each ratio the median of the rounds' own "
                 "ratios (listed after it). The peers are written here "
                 "(`bench/python/peers.py`) on Debian's python3-torch and the same OpenBLAS: DDP over gloo with 2 "
                 "processes, and a GPipe of 2 processes (conv | fc, 4 microbatches, point-to-point over gloo); the "
                 "plain loop is `bench_trainer_overhead`'s LibTorch C++ loop, pipetrain's one worker `pipetrain "
                 "train`. Every process allocates through tcmalloc (src/core/host_allocator.h; the peers through "
                 "LD_PRELOAD): under glibc's defaults PyTorch here returned its activations to the kernel every step "
                 "and ran at a third of its speed; and computes with one OpenBLAS thread (the peers through "
                 "OPENBLAS_NUM_THREADS=1: torch.set_num_threads(1) leaves OpenBLAS one a core). pipetrain's gloo "
                 "workers on one host all-reduce and hand tensors over through shared memory; the rows `-tcp` run "
                 "them over gloo's TCP, as the peers run (PIPETRAIN_SHARED_MEMORY=0), and the goal is theirs.")


def section_imported(md):
    section_text(md, "An imported model against the same network in the zoo (measured)", "imported.txt",
                 "`bench/imported_vs_zoo.sh`: mnist-cnn written in PyTorch (`bench/python/mnist_cnn.py`), exported "
                 "with `pipetrain export` and trained from the file, beside `--model mnist-cnn`; one worker, "
                 "Fashion-MNIST, batch 64, runs interleaved (docs/import.md).")


def section_families(md):
    section_text(md, "Model families as people write them (measured)", "families.txt",
                 "`bench/python/families_throughput.py`: the models of `tests/python/family_models.py` (each "
                 "small: widths 8-32), exported as written, trained for 40 steps of batch 32 by eager PyTorch "
                 "(torch.optim.SGD, on 1 and on all threads), by pipetrain on one worker and by pipetrain's 1F1B on "
                 "2 stages with 4 microbatches (a thread per stage); runs interleaved, medians. Eager PyTorch allocates "
                 "through tcmalloc as pipetrain does (LD_PRELOAD in bench/all.sh) and sets OpenBLAS's threads with "
                 "torch's: under glibc's malloc it had run 1.19-1.63x slower here, and "
                 "pipetrain's one worker read 1.07-1.23x eager's (2026-11-29), where on the same footing it runs a "
                 "little under eager on models this small (its per-step work weighs on little compute). Their weights agree "
                 "with eager PyTorch to 1e-5 (`family_fidelity`, docs/import.md). Models this small gain nothing "
                 "from a pipeline on 2 cores: a microbatch of 8 token sequences is a few hundred microseconds of "
                 "compute, which the per-microbatch work of the runtime (transfers, autograd's graph per "
                 "microbatch) matches.")


def section_bf16(md):
    section_text(md, "bf16 against fp32 on this CPU (measured)", "bf16.txt",
                 "`bench/bf16.sh`: the same training with `--precision fp32` and `--precision bf16` "
                 "(torch.autocast's bf16 compute, fp32 master weights, bf16 between stages: docs/runtime.md), "
                 "runs interleaved, medians of train's samples/s. bf16 is faster here: this CPU has AVX512-BF16, "
                 "which LibTorch's oneDNN (MKL-DNN 2.6) kernels use for bf16 products, and bf16 tensors are half "
                 "the bytes; that gains more than autocast's casts cost (not broken down further). The pipelines "
                 "gain less than one worker: their per-microbatch work (transfers, a graph per microbatch) and the "
                 "casts at each boundary stay what they were.")


def section_optimizer_step(md):
    section_text(md, "The optimizer step: one pass against torch.optim (measured)", "optimizer_step.txt",
                 "`build/bench/bench_optimizer_step 15`: a stage's step (model/optimizer.h, one pass over each "
                 "weight, gradient and state: model/fused_step.h) against LibTorch's own SGD, Adam and AdamW on "
                 "the same float weights, gradients and settings (weight decay 0.01; sgd's momentum 0.9), one "
                 "compute thread, steps interleaved, the medians of 14 after the first (which allocates the "
                 "state). 'same weights': the two left bit-identical weights.")


def section_async_accuracy(md):
    section_text(md, "Asynchronous training reaches one worker's accuracy (measured)", "async_accuracy.txt",
                 "`bench/async_accuracy.sh`: pipedream on 4 stages (`train --stages 4 --schedule pipedream`) "
                 "with the paper's weight stashing alone (`--no-weight-prediction --stale-warmup 0`) and with "
                 "pipetrain's defaults: each minibatch runs on weights predicted as many steps ahead as its "
                 "gradient is applied (SpecTrain), and a stage whose gradients lag s steps warms its learning rate "
                 "up over 100 s minibatches (docs/runtime.md).")


def section_replica_gradients(md):
    section_text(md, "pipedream's replicated stages: their gradients' mean or sum (measured)", "replica_gradients.txt",
                 "`bench/replica_gradients.sh`: pipedream with replicated stages, each replica a whole minibatch "
                 "of 64, a round of r minibatches stepping once with their gradients' mean (the default since "
                 "2026-12-05, PipeDream's and DDP's) or their sum (`--replica-gradients sum`, r times the rate); "
                 "every stage replicated on 4 and 8 workers (`train --workers N --schedule pipedream`), and 1-3 "
                 "and 3-1 (conv1-conv2 | fc1-fc3); two epochs at the CLI's defaults, threads, beside one worker.")


def section_memory(md):
    section_text(md, "Memory per process: the memory model against the OS (measured)", "memory_per_process.txt",
                 "`bench/memory_per_process.sh`: mlp --width 4 --depth 8 on 4 stages of 4 gloo processes; modelled = "
                 "the memory model's tensors + the data + calibrate's `process_bytes`; measured = each process's "
                 "peak RSS (VmHWM of /proc/PID/status, as train prints it).")
    section_text(md, "A model larger than one worker, trained on workers of 1 GiB (measured, testbed)",
                 "larger_than_one_worker.txt",
                 "`bench/larger_than_one_worker.sh`: mlp --width 4 --depth 16 (3.2 GB of training state) on 6 "
                 "testbed workers, each in a 1 GiB memory cgroup, beside one worker without a limit.")


BY_HAND, END_BY_HAND = "<!-- by hand -->", "<!-- /by hand -->"


def split_sections(text):
    """[(heading or None for the preamble, the lines through the next heading)]."""
    parts = [[None, []]]
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            parts.append([line.strip(), []])
        parts[-1][1].append(line)
    return parts


def update_sections(old, new):
    """`old` (docs/results.md) with each section that `new` regenerated from a benchmark that ran
    replaced in place; the rest (sections whose benchmark did not run this time, the sections
    written by hand from real_compute.py, planner_choice.py and staleness.sh, the notes) kept; a
    regenerated section the old file lacks added at its end (it was dropped without a word)."""
    fresh = {h: "".join(body) for h, body in split_sections(new)
             if h is not None and "(not run)" not in "".join(body[1:3])}
    parts = split_sections(old)
    held = {h for h, _ in parts}

    def regenerated(h, body):
        # A regenerated section keeps what was written into it by hand between BY_HAND and
        # END_BY_HAND (analysis the generator does not write: it was dropped without a word).
        kept = re.findall(re.escape(BY_HAND) + r".*?" + re.escape(END_BY_HAND) + r"\n?", "".join(body), re.S)
        if not kept:
            return fresh[h]
        return fresh[h].rstrip("\n") + "\n\n" + "\n".join(k.rstrip("\n") + "\n" for k in kept) + "\n"

    text = "".join(regenerated(h, body) if h in fresh else "".join(body) for h, body in parts)
    added = [body for h, body in fresh.items() if h not in held]
    return text + ("\n" if added and not text.endswith("\n\n") else "") + "\n".join(added)


def main():
    os.makedirs(PICS, exist_ok=True)
    runs = emulated_runs()
    md = ["# Results\n",
          f"Generated by `bench/all.sh` (`bench/report.py`) on {machine()}; each section says when its figures "
          "were measured. "
          "Figures marked *emulated* come from the testbed (scripts/testbed.sh): one process per worker in "
          "its own network namespace, links shaped with `tc tbf`, compute a timed wait of the profiled "
          "V100-class layer times (docs/emulation.md). Times are scaled by S (2, or 8 and 16 where a run's workers "
          "outnumber the cores more: each row says its own) and bytes by B = 0.02, so a testbed link runs at the "
          "emulated bandwidth x B / S (bandwidth / 100 at S = 2, / 800 at S = 16), and every time is divided "
          "by S before it is shown: the figures are those of the emulated cluster. Figures marked *measured* "
          "are real LibTorch training on this machine's CPU.\n"]
    emulated = os.path.join(OUT, "emulated_cluster")
    dated(md, lambda: section_table1(runs, md), emulated)
    dated(md, lambda: section_hierarchical(runs, md), emulated)
    dated(md, lambda: section_schedules(runs, md), emulated)
    impossible = dated(md, lambda: section_sim_error(runs, md), emulated)
    dated(md, lambda: section_sweep(runs, md), emulated)
    section_efficiency(md)
    section_real_cpu(md)
    section_plan_speed(md)
    section_peers(md)
    section_imported(md)
    section_families(md)
    section_bf16(md)
    section_optimizer_step(md)
    section_async_accuracy(md)
    section_replica_gradients(md)
    section_memory(md)
    path = os.path.join(DOCS, "results.md")
    if "--update" in sys.argv[1:]:
        text = update_sections(open(path).read(), "\n".join(md) + "\n")
    else:
        notes = os.path.join(DOCS, "results_notes.md")
        if os.path.exists(notes):
            md.append(open(notes).read())
        text = "\n".join(md) + "\n"
    open(path, "w").write(text)
    print(f"wrote {os.path.relpath(os.path.join(DOCS, 'results.md'), ROOT)} and {len(os.listdir(PICS))} pictures "
          f"in {os.path.relpath(PICS, ROOT)}")
    if impossible:
        print("report: figures over the physical limit:\n  " + "\n  ".join(impossible), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
