"""Two layers called from two Python threads: how much of the GIL-free concurrency is real.

For each configuration, interleaved over rounds:
  sequential   one thread calls layer A N times, then layer B N times
  concurrent   two threads, one per layer, N calls each, started together
ratio = sequential / concurrent: 2.0 means the two layers computed fully at once, 1.0 means
they took turns (what a held GIL would give). The ratio needs two idle cores. overlap = the
share of the shorter thread's time inside layer calls during which the other thread was
inside one too: 0 if the calls took turns, near 1 if they ran at once; it shows the GIL is
released even on a machine too busy to give the second thread a core of its own.

Configurations:
  threads=1    each layer on a one-thread runtime: each call computes on its caller's thread
  shared       both layers on the process's runtime of every CPU: the first call takes the
               pool, a call arriving meanwhile computes on its own thread (mxmoe::Runtime)

  PYTHONPATH=build/python build/venv/bin/python bench/python/concurrency.py [--rounds 7]
      [--calls 20] [--tokens 16] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time

import numpy as np

import mxmoe


def run_sequential(a, b, xa, xb, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        a(xa)
    for _ in range(calls):
        b(xb)
    return time.perf_counter() - t0


def run_concurrent(a, b, xa, xb, calls):
    """(wall seconds, overlap share) of two threads calling a and b."""
    barrier = threading.Barrier(3)
    spans = {0: [], 1: []}

    def work(i, layer, x):
        barrier.wait()
        for _ in range(calls):
            t0 = time.perf_counter()
            layer(x)
            spans[i].append((t0, time.perf_counter()))

    threads = [threading.Thread(target=work, args=(0, a, xa)),
               threading.Thread(target=work, args=(1, b, xb))]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    both, i, j = 0.0, 0, 0
    sa, sb = spans[0], spans[1]
    while i < len(sa) and j < len(sb):  # intersection of two sorted lists of intervals
        both += max(0.0, min(sa[i][1], sb[j][1]) - max(sa[i][0], sb[j][0]))
        if sa[i][1] < sb[j][1]:
            i += 1
        else:
            j += 1
    busy = min(sum(e - s for s, e in sa), sum(e - s for s, e in sb))
    return wall, both / busy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    # Two layers of a gpt-oss-shaped checkpoint at a quarter of the width: each call is
    # milliseconds of compute, so thread start-up and the boundary are noise.
    work = tempfile.mkdtemp(prefix="mxmoe_py_concurrency_")
    path = mxmoe.generate(f"{work}/ckpt", "gpt-oss-20b", layers=2, hidden=768, intermediate=768)
    model = mxmoe.Model(path)
    rng = np.random.default_rng(3)
    results = {}
    print(f"two layers of {model.path} (gpt-oss-20b, E=32 top-4, H=I=768), {args.tokens} tokens "
          f"a call, {args.calls} calls per layer, {args.rounds} rounds")
    print(f"{'configuration':<14} {'sequential s':>13} {'concurrent s':>13} {'ratio':>6} "
          f"{'(min..max)':>12} {'overlap':>8}")
    for name, threads in (("threads=1", 1), ("shared", 0)):
        a = model.layer(0, activation="bf16", threads=threads)
        b = model.layer(1, activation="bf16", threads=threads)
        xa = rng.standard_normal((args.tokens, a.hidden), dtype=np.float32)
        xb = rng.standard_normal((args.tokens, b.hidden), dtype=np.float32)
        run_sequential(a, b, xa, xb, 2)  # warm-up
        seq, con, ratios, overlaps = [], [], [], []
        for _ in range(args.rounds):
            s = run_sequential(a, b, xa, xb, args.calls)
            c, overlap = run_concurrent(a, b, xa, xb, args.calls)
            seq.append(s)
            con.append(c)
            ratios.append(s / c)
            overlaps.append(overlap)
        results[name] = dict(sequential_s=statistics.median(seq),
                             concurrent_s=statistics.median(con),
                             ratio=statistics.median(ratios), ratio_min=min(ratios),
                             ratio_max=max(ratios), overlap=statistics.median(overlaps),
                             layer_threads=a.threads)
        print(f"{name:<14} {statistics.median(seq):>13.4f} {statistics.median(con):>13.4f} "
              f"{statistics.median(ratios):>6.2f} {min(ratios):>5.2f}..{max(ratios):<5.2f} "
              f"{statistics.median(overlaps):>8.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(tokens=args.tokens, calls=args.calls, rounds=args.rounds,
                           results=results), f, indent=2)


if __name__ == "__main__":
    main()
