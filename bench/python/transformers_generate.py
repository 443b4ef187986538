"""Whole-model speed and memory of mxmoe.transformers beside transformers alone.

Each configuration runs in its own child process (so its peak resident memory is its own):
load time and peak RSS; prefill tokens/s on a --prompt-tokens prompt; decode tokens/s at each
--batch (steps through the KV cache, one token per sequence a step, median and p10-p90 over
--decode-steps); the share of a decode step spent in mxmoe's MoE blocks; and at batch 1 the
model's bandwidth limit: the bytes one decoded token must read (every non-expert weight but
the embedding table, plus the top-k experts of every MoE layer and the routers) divided by
this machine's DRAM read bandwidth, measured by `mxmoe bench --limits` in the same run
(before and after the children; the best and the median pass are both printed).

transformers alone loads the same checkpoint with its own loading (on a CPU it dequantizes
MXFP4 experts to bf16, and needs accelerate); when the bytes it would ask for exceed the
memory available (--memory-gb, default: MemAvailable) it is not started, and the bytes are
reported instead.

  python bench/python/transformers_generate.py --model DIR [--threads 2] [--batch 1,8]
      [--prompt-tokens 512] [--decode-steps 16] [--skip-transformers] [--torch-threads N]
      [--json OUT]

The MXMOE_* variables apply (MXMOE_ACTIVATION, MXMOE_MAX_ISA, ...). Needs the mxmoe package
with the transformers extra, and the mxmoe command (--cli, default build/mxmoe).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

CHILD = r"""
import json, os, statistics, sys, time
args = json.loads(sys.argv[1])

def status():
    d = dict(l.split(":", 1) for l in open("/proc/self/status"))
    return {k: int(d[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}

import torch
torch.set_num_threads(args["torch_threads"])
import transformers
import mxmoe.transformers as mt
base = status()["VmRSS"]
t0 = time.perf_counter()
if args["engine"] == "mxmoe":
    model = mt.from_pretrained(args["model"], threads=args["threads"])
else:
    model = transformers.AutoModelForCausalLM.from_pretrained(args["model"], dtype=torch.bfloat16)
load_s = time.perf_counter() - t0
load_peak = status()["VmHWM"]

moe_seconds = [0.0]
if args["engine"] == "mxmoe":
    for block in model.modules():
        if isinstance(block, mt.MxmoeMoeBlock):
            inner = block.forward
            def timed(*a, _inner=inner, **k):
                s = time.perf_counter()
                try:
                    return _inner(*a, **k)
                finally:
                    moe_seconds[0] += time.perf_counter() - s
            block.forward = timed

vocab = model.config.get_text_config().vocab_size
g = torch.Generator().manual_seed(0)
out = {"engine": args["engine"], "load_s": load_s, "base_rss": base, "load_peak": load_peak}
with torch.inference_mode():
    prompt = torch.randint(3, vocab, (1, args["prompt_tokens"]), generator=g)
    model(prompt[:, :8])  # warm: first-call costs (thread pools, workspaces)
    s = time.perf_counter()
    model(prompt)
    out["prefill_s"] = time.perf_counter() - s
    out["prefill_tokens_per_s"] = args["prompt_tokens"] / out["prefill_s"]
    rows = []
    for batch in args["batches"]:
        ids = torch.randint(3, vocab, (batch, 16), generator=g)
        r = model(ids, use_cache=True)
        cache, nxt = r.past_key_values, r.logits[:, -1:].argmax(-1)
        steps, moe = [], []
        for _ in range(args["decode_steps"] + 2):
            moe_seconds[0] = 0.0
            s = time.perf_counter()
            r = model(nxt, past_key_values=cache, use_cache=True)
            steps.append(time.perf_counter() - s)
            moe.append(moe_seconds[0])
            cache, nxt = r.past_key_values, r.logits[:, -1:].argmax(-1)
        steps, moe = steps[2:], moe[2:]  # the first steps grow the cache's buffers
        q = statistics.quantiles(steps, n=10)
        rows.append({"batch": batch, "step_s": statistics.median(steps), "p10": q[0],
                     "p90": q[-1], "tokens_per_s": batch / statistics.median(steps),
                     "moe_share": statistics.median(m / t for m, t in zip(moe, steps))})
    out["decode"] = rows
out["peak_rss"] = status()["VmHWM"]
print(json.dumps(out))
"""


def _limits(cli: str) -> dict:
    report = json.loads(subprocess.run([cli, "bench", "--limits", "--json"], check=True,
                                       capture_output=True, text=True).stdout)
    passes = report["machine"]["dram_passes_all_threads"]
    return {"best": max(passes), "median": statistics.median(passes), "passes": passes}


def _checkpoint_bytes(directory: str):
    """(all tensor bytes, bytes one token reads at batch 1, expert bytes, dequantized bytes)."""
    from safetensors import safe_open  # noqa: PLC0415

    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    text = config.get("text_config", config)
    experts = text.get("num_local_experts") or text.get("num_experts") or text["n_routed_experts"]
    top_k = text["num_experts_per_tok"]
    total = expert = embedding = 0
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(directory, name), "np") as f:
            for key in f.keys():
                info = f.get_slice(key)
                shape = info.get_shape()
                size = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "I8": 1, "F8_E8M0": 1,
                        "F8_E4M3": 1, "I32": 4, "I64": 8}[info.get_dtype()]
                n = size
                for d in shape:
                    n *= d
                total += n
                if ".experts." in key:
                    expert += n
                elif "embed_tokens" in key:
                    embedding += n
    per_token = total - expert - embedding + expert * top_k / experts
    dequantized = total - expert + expert * 32 / 17 * 2  # 17 bytes a 32-block -> 2 bytes a value
    return total, per_token, expert, dequantized


def _memory_available() -> int:
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint directory (mxmoe synth "
                    "--full, or a real model)")
    ap.add_argument("--threads", type=int, default=2, help="mxmoe's pool (default 2)")
    ap.add_argument("--torch-threads", type=int, default=0,
                    help="torch's intra-op threads (default: --threads)")
    ap.add_argument("--batch", default="1,8", help="decode batch sizes, comma list")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-steps", type=int, default=16)
    ap.add_argument("--skip-transformers", action="store_true",
                    help="do not run transformers alone")
    ap.add_argument("--memory-gb", type=float, default=0,
                    help="memory transformers alone may use (default: MemAvailable)")
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "mxmoe"))
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    batches = [int(b) for b in args.batch.split(",")]

    total, per_token, expert, dequantized = _checkpoint_bytes(args.model)
    print(f"checkpoint {args.model}: {total / 1e9:.2f} GB ({expert / total:.1%} experts); "
          f"a token at batch 1 reads {per_token / 1e9:.3f} GB", flush=True)
    before = _limits(args.cli)
    runs = []
    engines = ["mxmoe"] + ([] if args.skip_transformers else ["transformers"])
    for engine in engines:
        if engine == "transformers":
            room = args.memory_gb * 1e9 or _memory_available()
            if dequantized > 0.9 * room:
                print(f"transformers alone: not started: dequantizing asks for "
                      f"{dequantized / 1e9:.1f} GB of {room / 1e9:.1f} GB available", flush=True)
                runs.append({"engine": engine, "skipped": True, "asks_bytes": dequantized})
                continue
        child = {"engine": engine, "model": args.model, "threads": args.threads,
                 "torch_threads": args.torch_threads or args.threads, "batches": batches,
                 "prompt_tokens": args.prompt_tokens, "decode_steps": args.decode_steps}
        t = time.perf_counter()
        result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(child)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            print(f"{engine}: failed after {time.perf_counter() - t:.0f} s:\n"
                  f"{result.stderr[-3000:]}", flush=True)
            runs.append({"engine": engine, "failed": result.stderr[-3000:]})
            continue
        runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
    after = _limits(args.cli)

    dram = max(before["best"], after["best"])
    dram_median = statistics.median(before["passes"] + after["passes"])
    limit_tps = dram * 1e9 / per_token
    print(f"DRAM read (mxmoe bench --limits, before and after): best {dram:.1f} GB/s, median "
          f"pass {dram_median:.1f} GB/s -> batch-1 limit {limit_tps:.2f} tokens/s "
          f"({dram_median * 1e9 / per_token:.2f} at the median pass)")
    for r in runs:
        if r.get("skipped") or r.get("failed"):
            continue
        print(f"\n{r['engine']}: load {r['load_s']:.1f} s, peak RSS {r['peak_rss'] / 1e9:.2f} GB "
              f"({r['peak_rss'] / total:.3f}x the checkpoint; after imports "
              f"{r['base_rss'] / 1e9:.2f} GB); prefill {args.prompt_tokens} tokens "
              f"{r['prefill_s']:.2f} s = {r['prefill_tokens_per_s']:.1f} tokens/s")
        for d in r["decode"]:
            line = (f"  decode batch {d['batch']}: {d['step_s'] * 1e3:.1f} ms a step "
                    f"(p10-p90 {d['p10'] * 1e3:.1f}-{d['p90'] * 1e3:.1f}) = "
                    f"{d['tokens_per_s']:.2f} tokens/s")
            if r["engine"] == "mxmoe":
                line += f", MoE {d['moe_share']:.0%} of the step"
            if d["batch"] == 1:
                line += f", {d['tokens_per_s'] / limit_tps:.0%} of the bandwidth limit"
            print(line)
    if args.json:
        with open(args.json + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"checkpoint_bytes": total, "bytes_per_token": per_token,
                       "dram": {"before": before, "after": after}, "runs": runs}, f, indent=2)
        os.replace(args.json + ".tmp", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
