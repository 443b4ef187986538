"""vLLM's CPU build offline, with the mxmoe plugin and without it (MXMOE_VLLM=0), one engine
each in its own child process: start-up time, peak RSS of the engine's processes, prefill
tokens/s (a --prompt-tokens prompt, one new token) and decode tokens/s at each --batch (the
time of --decode-tokens more new tokens a sequence, less the prefill's, median of --reps), and
the MoE share of each: the experts' time inside the running engine (the plugin's
MXMOE_VLLM_MOE_TIMES, which times vLLM's own experts too) over the wall time of the same runs.
Run in the plugin's venv (scripts/vllm_env.sh) with mxmoe on PYTHONPATH.

  python bench/python/vllm_generate.py --model DIR [--batch 1,8] [--prompt-tokens 512]
      [--decode-tokens 32] [--reps 3] [--modes plugin,own]

Without AMX, vLLM's own path does not start: its row then says why.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import shutil
import subprocess
import sys
import tempfile

CHILD = r"""
import glob, json, os, resource, statistics, sys, time
args = json.loads(sys.argv[1])

def descendants_hwm():
    # {pid: VmHWM bytes} of every process below this one.
    parent = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                    parent[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    mine, todo = set(), [os.getpid()]
    while todo:
        p = todo.pop()
        for c, pp in parent.items():
            if pp == p and c not in mine:
                mine.add(c)
                todo.append(c)
    hwm = {}
    for pid in mine:
        try:
            with open(f"/proc/{pid}/status", encoding="utf-8") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        hwm[pid] = int(line.split()[1]) * 1024
        except OSError:
            pass
    return hwm

def moe_seconds():
    # The experts' seconds so far in every engine process (written within 0.1 s of a change).
    time.sleep(0.3)
    total = 0.0
    for path in glob.glob(os.environ["MXMOE_VLLM_MOE_TIMES"] + ".*.json"):
        with open(path, encoding="utf-8") as f:
            total += json.load(f)["seconds"]
    return total

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
    m0 = moe_seconds()
    pre = [timed(long, 1) for _ in range(args["reps"])]
    out["prefill_s"] = statistics.median(pre)
    out["prefill_tokens_per_s"] = args["prompt_tokens"] / out["prefill_s"]
    out["prefill_moe_share"] = (moe_seconds() - m0) / sum(pre)
    out["decode"] = []
    for b in args["batches"]:
        prompts = [[(11 * i + j) % 1000 + 3 for i in range(16)] for j in range(b)]
        timed(prompts, 2)
        m0 = moe_seconds()
        bases = [timed(prompts, 1) for _ in range(args["reps"])]
        m1 = moe_seconds()
        full = [timed(prompts, 1 + args["decode_tokens"]) for _ in range(args["reps"])]
        m2 = moe_seconds()
        base = statistics.median(bases)
        step = (statistics.median(full) - base) / args["decode_tokens"]
        moe_step = ((m2 - m1) - (m1 - m0)) / args["reps"] / args["decode_tokens"]
        # The MoE's seconds are totals over the runs, the step a median: the share is an
        # estimate (near a run's share when the runs agree, which spread_s shows).
        out["decode"].append({"batch": b, "step_s": step, "tokens_per_s": b / step,
                              "spread_s": [min(full), max(full)], "moe_step_s": moe_step,
                              "moe_share": moe_step / step if step > 0 else 0.0})
    # Peak resident memory of this process and of every engine process it started (the engine
    # core, the worker), read from their VmHWM while they still run: the children are not
    # waited for, so RUSAGE_CHILDREN would not count them.
    out["peak_rss_self"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["peak_rss_children"] = descendants_hwm()
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
    times_dir = tempfile.mkdtemp(prefix="mxmoe_vllm_times_")
    for mode in args.modes.split(","):
        env = {**os.environ, "MXMOE_VLLM": "1" if mode == "plugin" else "0",
               "MXMOE_VLLM_MOE_TIMES": os.path.join(times_dir, mode),
               "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
        r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(job)], capture_output=True,
                           text=True, env=env)
        lines = [x for x in r.stdout.splitlines() if x.startswith("MXMOE_RESULT ")]
        if r.returncode != 0 or not lines:
            text = (r.stdout + r.stderr).strip().splitlines()
            # The root cause: the first exception line (the engine core's own), else the tail.
            causes = [x for x in text if re.search(r"\b[A-Za-z]+(Error|Exception): ", x)]
            print(f"{mode}: failed: " + (causes[0].strip() if causes else " | ".join(text[-5:])),
                  flush=True)
            continue
        res = results[mode] = json.loads(lines[-1][len("MXMOE_RESULT "):])
        engines = res["peak_rss_children"].values()
        print(f"{mode}: start-up {res['startup_s']:.1f} s, peak RSS {res['peak_rss_self'] / 1e9:.2f}"
              f" GB (main), {max(engines, default=0) / 1e9:.2f} GB (largest engine process), "
              f"{sum(engines) / 1e9:.2f} GB (all {len(engines)} engine processes); prefill "
              f"{args.prompt_tokens} tokens {res['prefill_s']:.2f} s = "
              f"{res['prefill_tokens_per_s']:.1f} tokens/s ({res['prefill_moe_share']:.0%} in the "
              f"MoE experts)", flush=True)
        for d in res["decode"]:
            print(f"  decode batch {d['batch']}: {d['step_s'] * 1e3:.1f} ms a step "
                  f"({d['spread_s'][0]:.2f}-{d['spread_s'][1]:.2f} s a run) = "
                  f"{d['tokens_per_s']:.2f} tokens/s; the MoE experts "
                  f"{d['moe_step_s'] * 1e3:.1f} ms = {d['moe_share']:.0%} of the step", flush=True)
    if "plugin" in results and "own" in results:
        for a, b in zip(results["plugin"]["decode"], results["own"]["decode"]):
            moe = (f", {b['moe_step_s'] / a['moe_step_s']:.2f}x its MoE experts"
                   if a["moe_step_s"] > 0 and b["moe_step_s"] > 0 else
                   " (the MoE experts were not timed)")
            print(f"batch {a['batch']}: plugin {b['step_s'] / a['step_s']:.2f}x vLLM's own step"
                  + moe)
    shutil.rmtree(times_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
