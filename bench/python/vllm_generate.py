"""vLLM's CPU build offline, with the mxmoe plugin and without it (MXMOE_VLLM=0), one engine
each in its own child process: start-up time, peak RSS of the engine's processes, prefill
tokens/s (a --prompt-tokens prompt, one new token) and decode tokens/s at each --batch (the
time of --decode-tokens more new tokens a sequence, less the prefill's, median of --reps).
Run in the plugin's venv (scripts/vllm_env.sh) with mxmoe on PYTHONPATH.

  python bench/python/vllm_generate.py --model DIR [--batch 1,8] [--prompt-tokens 512]
      [--decode-tokens 32] [--reps 3] [--modes plugin,own]

Without AMX, vLLM's own path does not start: its row then says why.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, os, resource, statistics, sys, time
args = json.loads(sys.argv[1])

def main():
    from vllm import LLM, SamplingParams
    t = time.perf_counter()
    llm = LLM(model=args["model"], dtype="bfloat16", enforce_eager=True, skip_tokenizer_init=True,
              max_model_len=args["prompt_tokens"] + args["decode_tokens"] + 32,
              max_num_seqs=max(args["batches"]), gpu_memory_utilization=0.1, seed=0)
    out = {"startup_s": time.perf_counter() - t}
    def timed(prompts, tokens):
        p = SamplingParams(max_tokens=tokens, min_tokens=tokens, temperature=0.0,
                           detokenize=False, ignore_eos=True)
        s = time.perf_counter()
        llm.generate([{"prompt_token_ids": q} for q in prompts], p, use_tqdm=False)
        return time.perf_counter() - s
    long = [[(7 * i) % 1000 + 3 for i in range(args["prompt_tokens"])]]
    timed(long, 1)
    pre = [timed(long, 1) for _ in range(args["reps"])]
    out["prefill_s"] = statistics.median(pre)
    out["prefill_tokens_per_s"] = args["prompt_tokens"] / out["prefill_s"]
    out["decode"] = []
    for b in args["batches"]:
        prompts = [[(11 * i + j) % 1000 + 3 for i in range(16)] for j in range(b)]
        timed(prompts, 2)
        base = statistics.median(timed(prompts, 1) for _ in range(args["reps"]))
        full = [timed(prompts, 1 + args["decode_tokens"]) for _ in range(args["reps"])]
        step = (statistics.median(full) - base) / args["decode_tokens"]
        out["decode"].append({"batch": b, "step_s": step, "tokens_per_s": b / step,
                              "spread_s": [min(full), max(full)]})
    # Peak resident memory of this process and its children (the engine core, the worker).
    out["peak_rss_self"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["peak_rss_children"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print("MXMOE_RESULT " + json.dumps(out), flush=True)

if __name__ == "__main__":
    main()
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default="plugin,own")
    args = ap.parse_args()
    job = {"model": args.model, "batches": [int(b) for b in args.batch.split(",")],
           "prompt_tokens": args.prompt_tokens, "decode_tokens": args.decode_tokens,
           "reps": args.reps}
    results = {}
    for mode in args.modes.split(","):
        env = {**os.environ, "MXMOE_VLLM": "1" if mode == "plugin" else "0",
               "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
        r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(job)], capture_output=True,
                           text=True, env=env)
        lines = [x for x in r.stdout.splitlines() if x.startswith("MXMOE_RESULT ")]
        if r.returncode != 0 or not lines:
            tail = (r.stdout + r.stderr).strip().splitlines()[-5:]
            print(f"{mode}: failed: " + " | ".join(tail), flush=True)
            continue
        res = results[mode] = json.loads(lines[-1][len("MXMOE_RESULT "):])
        print(f"{mode}: start-up {res['startup_s']:.1f} s, peak RSS {res['peak_rss_self'] / 1e9:.2f}"
              f" GB (main) / {res['peak_rss_children'] / 1e9:.2f} GB (largest child); prefill "
              f"{args.prompt_tokens} tokens {res['prefill_s']:.2f} s = "
              f"{res['prefill_tokens_per_s']:.1f} tokens/s", flush=True)
        for d in res["decode"]:
            print(f"  decode batch {d['batch']}: {d['step_s'] * 1e3:.1f} ms a step = "
                  f"{d['tokens_per_s']:.2f} tokens/s", flush=True)
    if "plugin" in results and "own" in results:
        for a, b in zip(results["plugin"]["decode"], results["own"]["decode"]):
            print(f"batch {a['batch']}: plugin {b['step_s'] / a['step_s']:.2f}x vLLM's own step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
