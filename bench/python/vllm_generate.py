"""vLLM's CPU build offline, in up to three modes, one engine each in its own child process:
"plugin" (the mxmoe plugin), "plugin-bi" (the plugin with VLLM_BATCH_INVARIANT=1: mxmoe's
batch-invariant MoE, linear layers and ops, docs/VLLM.md "Batch invariance") and "own" (vLLM
without the plugin, MXMOE_VLLM=0). Per engine: start-up time, peak RSS of the engine's
processes, prefill (a --prompt-tokens prompt, one new token) and decode at each --batch (the
time of --decode-tokens more new tokens a sequence, less the prefill's; median of --reps),
and each test's split between the MoE experts (the plugin's MXMOE_VLLM_MOE_TIMES: the
experts' apply, mxmoe's or vLLM's own), the dense matmuls (MXMOE_VLLM_DENSE_TIMES: vLLM's
cpu_unquantized_gemm, which every linear layer, the routers and the LM head call, whichever
kernel, the plugin's invariant one included) and the rest (attention, norms, sampling,
scheduling): the timers' seconds inside the running engine over the mean of the same runs.

--rounds N runs the modes N times, alternating (plugin, plugin-bi, plugin, plugin-bi, ...),
then gives per mode and test the median over the rounds with their min-max, and, with both
plugin and plugin-bi, "cost of invariance" per test: plugin-bi's step time over plugin's
(the ratio of the medians, and the min-max of the rounds' own ratios). vLLM binds its
worker's OpenMP threads by VLLM_CPU_OMP_THREADS_BIND (default "auto": on x86 one logical CPU
per core, less one core kept for the scheduler); --cpus LIST sets it (e.g. --cpus 0-1 for 2
threads on CPUs 0 and 1), and each run prints the cores vLLM bound. Run in the plugin's venv
(scripts/vllm_env.sh) with mxmoe and integrations/vllm on PYTHONPATH:

  python bench/python/vllm_generate.py --model DIR [--batch 1,8] [--prompt-tokens 512]
      [--decode-tokens 32] [--reps 3] [--rounds 1] [--modes plugin,own] [--cpus LIST]

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
import json, os, resource, statistics, sys, time
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

def seconds():
    # The timers' seconds so far in every engine process: {"moe": s, "dense": s}.
    from mxmoe_vllm import read_times
    return {k: read_times(os.environ[v])["seconds"] for k, v in
            (("moe", "MXMOE_VLLM_MOE_TIMES"), ("dense", "MXMOE_VLLM_DENSE_TIMES"))}

def split(added, runs, step):
    # STEP seconds (a mean over RUNS runs) as the experts', the dense matmuls' and the rest's,
    # from the timers' seconds ADDED over those runs.
    out = {"step_mean_s": step, "moe_s": added["moe"] / runs, "dense_s": added["dense"] / runs}
    out["rest_s"] = step - out["moe_s"] - out["dense_s"]
    return out

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
    t0 = seconds()
    pre = [timed(long, 1) for _ in range(args["reps"])]
    out["prefill"] = {"step_s": statistics.median(pre), "spread_s": [min(pre), max(pre)],
                      **split({k: v - t0[k] for k, v in seconds().items()}, args["reps"],
                              statistics.mean(pre))}
    out["prefill"]["tokens"] = args["prompt_tokens"]
    out["prefill"]["tokens_per_s"] = args["prompt_tokens"] / out["prefill"]["step_s"]
    out["decode"] = []
    for b in args["batches"]:
        prompts = [[(11 * i + j) % 1000 + 3 for i in range(16)] for j in range(b)]
        timed(prompts, 2)
        t0 = seconds()
        bases = [timed(prompts, 1) for _ in range(args["reps"])]
        t1 = seconds()
        full = [timed(prompts, 1 + args["decode_tokens"]) for _ in range(args["reps"])]
        t2 = seconds()
        n = args["reps"] * args["decode_tokens"]
        step = (statistics.median(full) - statistics.median(bases)) / args["decode_tokens"]
        # A decode step's split: what the runs with decode_tokens more steps added, over the
        # mean of the same runs (the step itself is the medians' difference).
        mean = (statistics.mean(full) - statistics.mean(bases)) / args["decode_tokens"]
        d = {"batch": b, "step_s": step, "tokens_per_s": b / step,
             "spread_s": [min(full), max(full)],
             **split({k: (t2[k] - t1[k]) - (t1[k] - t0[k]) for k in t0}, n, mean)}
        out["decode"].append(d)
    # Peak resident memory of this process and of every engine process it started (the engine
    # core, the worker), read from their VmHWM while they still run: the children are not
    # waited for, so RUSAGE_CHILDREN would not count them.
    out["peak_rss_self"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["peak_rss_children"] = descendants_hwm()
    print("MXMOE_RESULT " + json.dumps(out), flush=True)

if __name__ == "__main__":
    main()
"""


MODES = {"plugin": {"MXMOE_VLLM": "1", "VLLM_BATCH_INVARIANT": "0"},
         "plugin-bi": {"MXMOE_VLLM": "1", "VLLM_BATCH_INVARIANT": "1"},
         "own": {"MXMOE_VLLM": "0", "VLLM_BATCH_INVARIANT": "0"}}


def _tests(res):
    """(name, the test's result) for each test of one engine's result."""
    return ([(f"prefill {res['prefill']['tokens']}", res["prefill"])]
            + [(f"decode b{d['batch']}", d) for d in res["decode"]])


def _split(t):
    step = t["step_mean_s"]
    parts = [(t["moe_s"], "experts"), (t["dense_s"], "dense"), (t["rest_s"], "rest")]
    return ", ".join(f"{what} {x * 1e3:.1f} ms ({x / step if step > 0 else 0:.0%})"
                     for x, what in parts)


def _run(mode, job, times, cpus):
    """One engine in a child process: its result, or None (the reason printed)."""
    env = {**os.environ, **MODES[mode], "MXMOE_VLLM_MOE_TIMES": f"{times}-moe",
           "MXMOE_VLLM_DENSE_TIMES": f"{times}-dense",
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    if cpus:
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpus
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(job)], capture_output=True,
                       text=True, env=env)
    lines = [x for x in r.stdout.splitlines() if x.startswith("MXMOE_RESULT ")]
    if r.returncode != 0 or not lines:
        text = (r.stdout + r.stderr).strip().splitlines()
        # The root cause: the first exception line (the engine core's own), else the tail.
        causes = [x for x in text if re.search(r"\b[A-Za-z]+(Error|Exception): ", x)]
        print(f"{mode}: failed: " + (causes[0].strip() if causes else " | ".join(text[-5:])),
              flush=True)
        return None
    res = json.loads(lines[-1][len("MXMOE_RESULT "):])
    if "these times are no longer kept" in r.stdout + r.stderr:
        print(f"{mode}: a timer stopped counting (the engine's log says why): its split is "
              "not complete", flush=True)
    bound = re.findall(r"local_rank=0, core ids=\[([^\]]*)\]", r.stdout + r.stderr)
    res["cores"] = bound[-1] if bound else "?"
    engines = res["peak_rss_children"].values()
    print(f"{mode}: start-up {res['startup_s']:.1f} s, worker on cores [{res['cores']}], peak "
          f"RSS {res['peak_rss_self'] / 1e9:.2f} GB (main), {max(engines, default=0) / 1e9:.2f} "
          f"GB (largest engine process), {sum(engines) / 1e9:.2f} GB (all {len(engines)} engine "
          f"processes)", flush=True)
    p = res["prefill"]
    print(f"  prefill {job['prompt_tokens']} tokens {p['step_s']:.2f} s "
          f"({p['spread_s'][0]:.2f}-{p['spread_s'][1]:.2f}) = {p['tokens_per_s']:.1f} tokens/s; "
          + _split(p), flush=True)
    for d in res["decode"]:
        print(f"  decode batch {d['batch']}: {d['step_s'] * 1e3:.1f} ms a step "
              f"({d['spread_s'][0]:.2f}-{d['spread_s'][1]:.2f} s a run) = "
              f"{d['tokens_per_s']:.2f} tokens/s; " + _split(d), flush=True)
    return res


def _median(values):
    return statistics.median(values), min(values), max(values)


def _summary(results, rounds):
    """Per mode and test, the medians over the rounds (min-max); then the ratios."""
    print(f"== over {rounds} round(s): median (min-max) of each round's value", flush=True)
    for mode, runs in results.items():
        print(f"{mode} ({len(runs)} runs):")
        for i, (name, _) in enumerate(_tests(runs[0])):
            tests = [_tests(r)[i][1] for r in runs]
            step, lo, hi = _median([t["step_s"] for t in tests])
            mean = statistics.median(t["step_mean_s"] for t in tests)
            parts = []
            for key, what in (("moe_s", "experts"), ("dense_s", "dense"), ("rest_s", "rest")):
                x = statistics.median(t[key] for t in tests)
                parts.append(f"{what} {x * 1e3:.1f} ms ({x / mean if mean > 0 else 0:.0%})")
            print(f"  {name}: step {step * 1e3:.1f} ms ({lo * 1e3:.1f}-{hi * 1e3:.1f}); "
                  + ", ".join(parts), flush=True)
    if "plugin" in results and "plugin-bi" in results:
        base, bi = results["plugin"], results["plugin-bi"]
        for i, (name, _) in enumerate(_tests(base[0])):
            a = {r["round"]: _tests(r)[i][1]["step_s"] for r in base}
            b = {r["round"]: _tests(r)[i][1]["step_s"] for r in bi}
            # A round's ratio needs both modes of that round (a failed run leaves a gap) and
            # positive steps (a decode step is a difference of medians: noise can make it <= 0).
            paired = [b[k] / a[k] for k in a if k in b and a[k] > 0 and b[k] > 0]
            ma, mb = statistics.median(a.values()), statistics.median(b.values())
            if ma <= 0 or mb <= 0 or not paired:
                print(f"cost of invariance, {name}: not measured (a step of {ma * 1e3:.1f} ms "
                      f"against {mb * 1e3:.1f} ms; rerun with more --reps)", flush=True)
                continue
            print(f"cost of invariance, {name}: plugin-bi {mb * 1e3:.1f} ms / plugin "
                  f"{ma * 1e3:.1f} ms = {mb / ma:.2f}x (rounds {min(paired):.2f}-"
                  f"{max(paired):.2f}x)", flush=True)
    if "plugin" in results and "own" in results:
        for i, (name, _) in enumerate(_tests(results["plugin"][0])):
            a = statistics.median(_tests(r)[i][1]["step_s"] for r in results["plugin"])
            b = statistics.median(_tests(r)[i][1]["step_s"] for r in results["own"])
            moe_a = statistics.median(_tests(r)[i][1]["moe_s"] for r in results["plugin"])
            moe_b = statistics.median(_tests(r)[i][1]["moe_s"] for r in results["own"])
            moe = (f", {moe_b / moe_a:.2f}x its MoE experts" if moe_a > 0 and moe_b > 0 else
                   " (the MoE experts were not timed)")
            print(f"{name}: plugin {b / a:.2f}x vLLM's own step" + moe if a > 0 and b > 0 else
                  f"{name}: not compared (a step <= 0; rerun with more --reps)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the modes this many times, alternating")
    ap.add_argument("--modes", default="plugin,own", help=f"of {', '.join(MODES)}")
    ap.add_argument("--cpus", default="",
                    help="VLLM_CPU_OMP_THREADS_BIND for the engines (e.g. 0-1: 2 threads)")
    args = ap.parse_args()
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"unknown mode(s) {', '.join(unknown)} (of {', '.join(MODES)})")
    for name in ("prompt_tokens", "decode_tokens", "reps", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    try:
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError:
        ap.error(f"--batch {args.batch!r}: a comma list of whole numbers")
    if any(b < 1 for b in batches):
        ap.error(f"--batch {args.batch!r}: every batch must be at least 1")
    if not os.path.isfile(os.path.join(args.model, "config.json")):
        ap.error(f"--model {args.model!r}: no config.json there (a checkpoint directory)")
    job = {"model": args.model, "batches": batches,
           "prompt_tokens": args.prompt_tokens, "decode_tokens": args.decode_tokens,
           "reps": args.reps}
    results = {}
    times_dir = tempfile.mkdtemp(prefix="mxmoe_vllm_times_")
    for r in range(args.rounds):
        if args.rounds > 1:
            print(f"-- round {r + 1}/{args.rounds}", flush=True)
        for mode in modes:
            res = _run(mode, job, os.path.join(times_dir, f"{mode}-{r}"), args.cpus)
            if res is not None:
                res["round"] = r
                results.setdefault(mode, []).append(res)
    if results:
        _summary(results, args.rounds)
    shutil.rmtree(times_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
