"""The cost of a Python call: microseconds per call at 1 token, Python against C++, on the
same layer object, side by side (interleaved rounds so the machine's drift hits all alike).

  C++            MoeLayer::forward repeated in C++ (Layer._time_cpp_forward, GIL released once)
  numpy, out=    layer(x, out=y): argument checks, GIL release, the C++ call
  numpy          layer(x): the same plus a new result array
  routed int32   layer.forward_routed(x, ids, weights, out=y)
  routed int64   the same with int64 ids (narrowed and range-checked)
  torch          layer(x) on a torch tensor (when torch is installed)

Reports, on the wall clock and on the calling thread's CPU clock, the median per-call time of
each over the rounds, its spread (min..max over the rounds), and the overhead = Python - C++
(median of the per-round differences).

  PYTHONPATH=build/python build/venv/bin/python bench/python/overhead.py [--rounds 15]
      [--calls 2000] [--threads 1] [--shape tiny|gpt-oss-20b] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import numpy as np

import mxmoe

SHAPES = {
    # The layer of bench/capi_overhead.cpp's tiny case: E=8, H=I=256 (the boundary's share
    # is largest); gpt-oss-20b's real shape for the share at full size (writes ~420 MB).
    "tiny": dict(preset="gpt-oss-20b", experts=8, hidden=256, intermediate=256),
    "gpt-oss-20b": dict(preset="gpt-oss-20b"),
}


def per_call_us(fn, calls: int):
    """(wall, calling thread's CPU) microseconds per call."""
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(calls):
        fn()
    return ((time.perf_counter() - t0) / calls * 1e6, (time.thread_time() - c0) / calls * 1e6)


def cpp_per_call_us(layer, x, y, calls: int):
    wall, cpu = layer._time_cpp_forward(x, y, calls)
    return wall / calls * 1e6, cpu / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=1,
                    help="the layer's thread count (0 = every CPU); 1 keeps the compute "
                         "time steady so the difference is the boundary")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="mxmoe_py_overhead_")
    shape = dict(SHAPES[args.shape])
    path = mxmoe.generate(f"{work}/ckpt", shape.pop("preset"), **shape)
    layer = mxmoe.Model(path).layer(0, threads=args.threads)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, layer.hidden), dtype=np.float32)
    y = np.empty_like(x)
    ids32 = rng.permutation(layer.num_experts)[:layer.top_k].astype(np.int32)[None, :]
    ids64 = ids32.astype(np.int64)
    weights = np.full((1, layer.top_k), 1.0 / layer.top_k, np.float32)

    variants = {
        "C++": lambda n: cpp_per_call_us(layer, x, y, n),
        "numpy, out=": lambda n: per_call_us(lambda: layer(x, out=y), n),
        "numpy": lambda n: per_call_us(lambda: layer(x), n),
        "routed int32": lambda n: per_call_us(
            lambda: layer.forward_routed(x, ids32, weights, out=y), n),
        "routed int64": lambda n: per_call_us(
            lambda: layer.forward_routed(x, ids64, weights, out=y), n),
    }
    try:
        import torch  # noqa: PLC0415

        xt = torch.from_numpy(x.copy())
        variants["torch"] = lambda n: per_call_us(lambda: layer(xt), n)
    except ImportError:
        pass

    for run in variants.values():  # warm-up: workspaces, caches, first imports
        run(max(10, args.calls // 10))
    rounds = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, run in variants.items():
            rounds[name].append(run(args.calls))

    print(f"layer: {layer!r}")
    print(f"1 token, {args.calls} calls x {args.rounds} rounds, interleaved; microseconds per "
          f"call: median (min..max of the rounds), and the overhead = variant - C++ (median of "
          f"the per-round differences). CPU = the calling thread's CPU time, which a loaded "
          f"machine disturbs less than the wall clock (the layer computes on that thread)")
    results = {}
    for clock, index in (("wall", 0), ("CPU", 1)):
        print(f"\n{clock + ' clock':<14} {'per call':>9} {'spread':>19} {'overhead':>9}")
        cpp = [r[index] for r in rounds["C++"]]
        for name, values in rounds.items():
            v = [r[index] for r in values]
            overhead = statistics.median(a - c for a, c in zip(v, cpp))
            results.setdefault(name, {})[clock] = dict(
                median_us=statistics.median(v), min_us=min(v), max_us=max(v),
                overhead_us=overhead)
            spread = f"{min(v):.2f}..{max(v):.2f}"
            extra = "" if name == "C++" else f"{overhead:+.2f}"
            print(f"{name:<14} {statistics.median(v):>9.2f} {spread:>19} {extra:>9}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(layer=repr(layer), calls=args.calls, rounds=args.rounds,
                           results=results), f, indent=2)


if __name__ == "__main__":
    main()
