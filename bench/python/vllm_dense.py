"""vLLM's CPU dense GEMM against mxmoe's, on gpt-oss-20b's dense shapes (issue 37, item 3:
what the plugin could take over). For each shape and token count, alternating, --reps rounds:

  - vllm: what vLLM's CPU build binds for an unquantized bf16 linear layer of that size
    (vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm: oneDNN's onednn_mm on
    x86, or sgl-kernel's packed GEMM for small weights; whatever it picks on this machine),
    bf16 activations in and out, as vLLM runs them;
  - mxmoe: the plugin's linear (mxmoe_vllm.invariance.dense, the VLLM_BATCH_INVARIANT=1 path):
    mxmoe's dense_fp32_lanes16 class, the activations widened to float32 and the result
    rounded back to bf16, as the plugin does.

Each timing is the median of --calls calls; the table gives each engine's median over the
rounds (min-max), the GB/s of weights read, the GFLOP/s, and mxmoe's time over vLLM's. Run in
the plugin's venv (scripts/vllm_env.sh) with mxmoe on PYTHONPATH:

  python bench/python/vllm_dense.py [--tokens 1,8,512] [--reps 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

# (name, out, in): gpt-oss-20b's fused q/k/v projection, the attention output and the LM head.
SHAPES = [("qkv_proj", 5120, 2880), ("o_proj", 2880, 4096), ("lm_head", 201088, 2880)]


class _Layer(torch.nn.Module):
    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.bias = None


def _vllm_linear(weight: torch.Tensor):
    from vllm.model_executor.layers import utils  # noqa: PLC0415

    layer = _Layer(weight.clone())
    utils.dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
    return lambda x: layer.cpu_linear(x, layer.weight, None)


def _mxmoe_linear(weight: torch.Tensor):
    from mxmoe_vllm import invariance  # noqa: PLC0415

    mx = invariance.dense(weight)

    def run(x: torch.Tensor) -> torch.Tensor:
        return mx.forward(x.to(torch.float32).contiguous()).to(x.dtype)

    return run, mx.kernel


def _time(fn, x, calls: int) -> float:
    fn(x)  # warm: packing, first touch
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", default="1,8,512")
    parser.add_argument("--reps", type=int, default=3, help="rounds, engines alternating")
    parser.add_argument("--calls", type=int, default=5, help="calls timed a round (median)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shapes", default=",".join(s[0] for s in SHAPES))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokens = [int(t) for t in args.tokens.split(",")]
    wanted = args.shapes.split(",")
    print(f"torch {torch.__version__}, {args.threads} threads; medians of {args.reps} rounds "
          f"(min-max), each the median of {args.calls} calls\n")
    print("| shape | tokens | vLLM ms | mxmoe ms | mxmoe / vLLM | vLLM GB/s | mxmoe GB/s "
          "| vLLM GFLOP/s | mxmoe GFLOP/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    g = torch.Generator().manual_seed(0)
    for name, out, inn in SHAPES:
        if name not in wanted:
            continue
        weight = (torch.randn(out, inn, generator=g) * 0.02).to(torch.bfloat16)
        vllm = _vllm_linear(weight)
        mx, kernel = _mxmoe_linear(weight)
        for m in tokens:
            if name == "lm_head" and m > 8:
                continue  # a prefill computes the head for its last token only
            x = torch.randn(m, inn, generator=g).to(torch.bfloat16)
            a = vllm(x).float()
            b = mx(x).float()
            err = float((a - b).abs().max() / a.abs().max())
            samples = {"vllm": [], "mxmoe": []}
            for r in range(args.reps):
                order = ("vllm", "mxmoe") if r % 2 == 0 else ("mxmoe", "vllm")
                for engine in order:
                    fn = vllm if engine == "vllm" else mx
                    samples[engine].append(_time(fn, x, args.calls))
            v, w = statistics.median(samples["vllm"]), statistics.median(samples["mxmoe"])
            gb = out * inn * 2 / 1e9
            gf = 2 * m * out * inn / 1e9
            print(f"| {name} {out}x{inn} | {m} | {v * 1e3:.2f} ({min(samples['vllm']) * 1e3:.2f}-"
                  f"{max(samples['vllm']) * 1e3:.2f}) | {w * 1e3:.2f} "
                  f"({min(samples['mxmoe']) * 1e3:.2f}-{max(samples['mxmoe']) * 1e3:.2f}) | "
                  f"{w / v:.2f} | {gb / v:.1f} | {gb / w:.1f} | {gf / v:.0f} | {gf / w:.0f} |"
                  f"  <!-- mxmoe {kernel}; max difference {err:.1e} of the largest -->")
        del vllm, mx


if __name__ == "__main__":
    main()
