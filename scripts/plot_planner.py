#!/usr/bin/python3
"""Renders the deployment planner's charts from `epserve plan ... --json` (docs/planner.md).

    /usr/bin/python3 scripts/plot_planner.py --epserve build/tools/epserve --out docs

writes, for the source write-up's setup (DeepSeek-V3, KV 5000, query length 2, 60% acceptance;
EP8 on one H200 machine, EP16-EP128 on H100 machines):
  planner-pareto.png      throughput per machine vs output speed per request, frontier per EP
  planner-layer.png       per-kernel breakdown of one MoE layer (H100, TP1, 128 requests/GPU)
  planner-roofline.png    modeled GroupGEMM and GEMM points against the H100 roofs
  planner-microbatch.png  micro-batching vs dispatch overlap per batch size (EP128)
Extra arguments after `--` are passed to every epserve call (e.g. --efficiency FILE).
"""
import argparse
import json
import os
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

EP_COLORS = {8: "tab:blue", 16: "tab:orange", 32: "tab:green", 64: "tab:red", 128: "tab:purple"}
# The write-up's per-layer figures (us), drawn as markers next to the modeled bars.
PUBLISHED_LAYER = {"EP8": 1802, "EP128 NoOverlap": 2667, "EP128 DispatchOverlap": 2651,
                   "EP128 MicroBatch": 1896}


def run(epserve, args, extra):
    cmd = [epserve, "plan"] + args + ["--json"] + extra
    out = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), out.stderr))
    return json.loads(out.stdout)


def frontier(points):
    pts = sorted(points, key=lambda p: (-p["speed_tokens_per_s"], -p["throughput_per_machine"]))
    best, out = -1.0, []
    for p in pts:
        if p["throughput_per_machine"] > best:
            best = p["throughput_per_machine"]
            out.append(p)
    return out


def plot_pareto(epserve, extra, path):
    sweep = run(epserve, ["sweep", "--gpu", "H100", "--single-machine-gpu", "H200"], extra)
    fig, ax = plt.subplots(figsize=(9, 6))
    eps = sorted({p["ep"] for p in sweep["points"]})
    for ep in eps:
        pts = [p for p in sweep["points"] if p["ep"] == ep]
        color = EP_COLORS.get(ep)
        ax.scatter([p["speed_tokens_per_s"] for p in pts], [p["throughput_per_machine"] for p in pts],
                   s=4, alpha=0.25, color=color)
        f = frontier(pts)
        gpu = f[0]["gpu"] if f else ""
        ax.plot([p["speed_tokens_per_s"] for p in f], [p["throughput_per_machine"] for p in f],
                color=color, lw=2, label="EP%d (%s, %d machine%s)" % (
                    ep, gpu, pts[0]["machines"], "" if pts[0]["machines"] == 1 else "s"))
    ax.axvspan(40, 80, color="grey", alpha=0.08, label="40-80 tokens/s (write-up: EP128 ~5x EP8)")
    ax.set_yscale("log")
    ax.set_xlabel("output speed per request (tokens/s)")
    ax.set_ylabel("throughput per machine (tokens/s, log)")
    ax.set_title("DeepSeek-V3 decode, KV 5000, MTP query 2 @ 60%: modeled Pareto frontiers\n"
                 "(dots: every EP x TP x batch point; TP 1-8, 1-128 requests per DP group)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


CATEGORIES = [("gemm", "GEMM", "tab:blue"), ("bmm", "BMM", "tab:cyan"),
              ("attention", "Attention", "tab:green"), ("group_gemm", "GroupGEMM", "tab:red"),
              ("elementwise", "norm/act/quant", "tab:gray"), ("tp_collective", "TP comm", "tab:olive"),
              ("dispatch", "Dispatch (visible)", "tab:orange"),
              ("combine", "Combine (visible)", "tab:purple")]


def plot_layer(epserve, extra, path):
    series = [("EP8", ["--ep", "8", "--overlap", "dispatch-overlap"]),
              ("EP128 NoOverlap", ["--ep", "128", "--overlap", "none"]),
              ("EP128 DispatchOverlap", ["--ep", "128", "--overlap", "dispatch-overlap"]),
              ("EP128 MicroBatch", ["--ep", "128", "--overlap", "micro-batch"])]
    fig, ax = plt.subplots(figsize=(10, 5.4))
    for row, (label, args) in enumerate(series):
        layer = run(epserve, ["layer", "--gpu", "H100", "--batch", "128", "--ignore-memory"] + args,
                    extra)["step"]["moe_layer"]
        left = 0.0
        for key, name, color in CATEGORIES:
            width = layer["by_kind_us"].get(key, 0.0)
            ax.barh(row, width, left=left, color=color, label=name if row == 0 else None)
            if width > 120:
                ax.text(left + width / 2, row, "%.0f" % width, ha="center", va="center",
                        fontsize=8, color="white")
            left += width
        ax.text(left + 20, row, "%.0f us (published %d)" % (layer["total_us"], PUBLISHED_LAYER[label]),
                va="center", fontsize=9)
        ax.plot([PUBLISHED_LAYER[label]], [row + 0.42], marker="v", color="black", ms=7)
    ax.set_yticks(range(len(series)))
    ax.set_yticklabels([s[0] for s in series])
    ax.invert_yaxis()
    ax.set_xlim(0, 3500)
    ax.set_xlabel("time per MoE layer on one rank (us); black triangle: the write-up's total")
    ax.set_title("One DeepSeek-V3 MoE layer, H100, TP1, 128 requests/GPU, query 2, KV 5000 (modeled)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_roofline(epserve, extra, path):
    data = run(epserve, ["roofline", "--gpu", "H100", "--ep", "8,16,32,64,128",
                         "--batches", "1,2,4,8,16,32,64,128"], extra)
    roofs = data["roofs"]
    peak, bw = roofs["peak_tflops"], roofs["bandwidth_tbs"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    panels = [("GroupGEMM (routed experts, gate_up + down)", "group_gemm",
               lambda p: p["kind"] == "group_gemm"),
              ("GEMM (q_a+kv_a, q_b, o projections)", "gemm", lambda p: p["kind"] == "gemm")]
    for ax, (title, key, keep) in zip(axes, panels):
        grid = [0.5 * 1.05 ** i for i in range(190)]
        ax.plot(grid, [min(peak, bw * x) for x in grid], color="black", lw=1.5,
                label="H100 roof: %.0f TFLOP/s, %.2f TB/s" % (peak, bw))
        ce, me = roofs[key + "_compute"], roofs[key + "_memory"]
        ax.plot(grid, [min(peak * ce, bw * me * x) for x in grid], color="black", lw=1, ls="--",
                label="modeled roof: %.0f%% compute, %.0f%% bandwidth" % (100 * ce, 100 * me))
        eps = sorted({p["ep"] for p in data["points"]})
        if key == "gemm":
            eps = eps[-1:]  # the attention projections do not depend on EP: one series
        for ep in eps:
            # One point per (EP, batch): the kernels of the panel summed.
            by_batch = {}
            for p in data["points"]:
                if p["ep"] == ep and keep(p):
                    acc = by_batch.setdefault(p["batch"], [0.0, 0.0, 0.0])
                    acc[0] += p["flops"]
                    acc[1] += p["bytes"]
                    acc[2] += p["time_us"]
            batches = sorted(by_batch)
            x = [by_batch[b][0] / by_batch[b][1] for b in batches]
            y = [by_batch[b][0] / (by_batch[b][2] * 1e-6) / 1e12 for b in batches]
            label = "EP%d, batch 1-128" % ep if key != "gemm" else "every EP, batch 1-128 (m = 2-256)"
            ax.plot(x, y, marker="o", ms=3, color=EP_COLORS.get(ep), label=label)
            ax.plot(x[-1:], y[-1:], marker="*", ms=14, color=EP_COLORS.get(ep))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(0.5, 5000)
        ax.set_ylim(0.5, 4000)
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("achieved TFLOP/s (modeled)")
        ax.set_title(title + "\nstar: 128 requests/GPU")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_microbatch(epserve, extra, path):
    batches = [2, 4, 8, 16, 32, 64, 128]
    gains = []
    for b in batches:
        times = {}
        for mode in ("dispatch-overlap", "micro-batch"):
            layer = run(epserve, ["layer", "--gpu", "H100", "--ep", "128", "--batch", str(b),
                                  "--overlap", mode], extra)["step"]["moe_layer"]
            times[mode] = layer["total_us"]
        gains.append(100.0 * (times["dispatch-overlap"] / times["micro-batch"] - 1))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.bar([str(b) for b in batches], gains, color=["tab:red" if g < 0 else "tab:green" for g in gains])
    for i, g in enumerate(gains):
        ax.text(i, g + (2 if g >= 0 else -6), "%+.0f%%" % g, ha="center", fontsize=9)
    ax.axhline(0, color="black", lw=0.8)
    split = batches.index(32) - 0.5
    ax.fill_between([split, len(batches) - 0.5], 10, 35, color="tab:green", alpha=0.1,
                    label="write-up: +10-35% at >= 32")
    ax.fill_between([-0.5, split], -40, -5, color="tab:red", alpha=0.1,
                    label="write-up: -5-40% below 32")
    ax.set_xlim(-0.5, len(batches) - 0.5)
    ax.set_ylim(-50, 48)
    ax.set_xlabel("requests per GPU (EP128, TP1, H100)")
    ax.set_ylabel("MoE layer speed-up of micro-batching (%)")
    ax.set_title("Micro-batching vs dispatch overlap (modeled)")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epserve", default="build/tools/epserve", help="the epserve binary")
    parser.add_argument("--out", default="docs", help="folder for the PNG files")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    plot_pareto(args.epserve, extra, os.path.join(args.out, "planner-pareto.png"))
    plot_layer(args.epserve, extra, os.path.join(args.out, "planner-layer.png"))
    plot_roofline(args.epserve, extra, os.path.join(args.out, "planner-roofline.png"))
    plot_microbatch(args.epserve, extra, os.path.join(args.out, "planner-microbatch.png"))
    print("wrote planner-{pareto,layer,roofline,microbatch}.png to %s" % args.out)


if __name__ == "__main__":
    main()
