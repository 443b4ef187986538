#!/usr/bin/env python3
"""Whole gpt-oss-20b, side by side: mxmoe, llama.cpp and ik_llama.cpp on the same weights, the
same CPU and thread count, alternating, R rounds (issue 34's benchmark).

    bench/whole_model_peers.py --work /tmp/peers --rounds 2 --threads 2

Steps (each skipped when its output exists in --work):
  1. the checkpoint: `mxmoe synth --preset gpt-oss-20b --full` (13.8 GB) unless --model names one;
  2. llama.cpp: the sources vendored by the PyPI sdist llama-cpp-python==0.3.36 (llama.cpp
     0c1e570), `pip download --no-deps --no-binary :all:`, built CPU-only with the machine's
     native flags (llama-bench, llama-quantize), -j2 under nice;
  3. ik_llama.cpp: the commit --ik-commit (8337e4c) exported from a git directory (--ik-git: the
     mirror the search tool's `fetch github:ikawrakow/ik_llama.cpp` gives), built the same way;
  4. the GGUF as ggml-org makes gpt-oss's: llama.cpp's convert_hf_to_gguf.py --outtype bf16 (the
     experts are repacked as MXFP4, the other matrices bf16), then llama-quantize MXFP4_MOE
     (attention, embeddings and head Q8_0); the bf16 file is deleted after. mxmoe's stand-in
     tokenizer has no pre-tokenizer hash the converter knows: the wrapper below answers
     "gpt-4o" (o200k's, which gpt-oss uses) only where the converter would stop;
  5. R rounds, each: the DRAM read bandwidth (`mxmoe bench --limits`), mxmoe (`mxmoe bench
     --whole`), llama.cpp's llama-bench, ik_llama.cpp's llama-bench (-rtr 1 -fmoe 1), the engine
     order rotated from round to round; the load average before each;
  6. a markdown table (medians over every sample of every round, min-max) and all raw JSON
     under --work/results.

An engine may carry a variant after a colon, so that two settings alternate in one run:
`mxmoe:FLAGS` runs `mxmoe bench --whole` with FLAGS (space-separated, e.g. "mxmoe:--compact=int4")
added to those after --; `llama.cpp:LABEL` and `ik_llama.cpp:LABEL` read the GGUF that
`--gguf LABEL=PATH` names (e.g. one requantized with Q4_0 attention and head, to compare at
equal bytes) instead of the one made in step 4.

Nothing of llama.cpp or ik_llama.cpp enters this repository: sources, builds and GGUFs live
under --work. The converter's Python needs numpy, torch, transformers, safetensors, pyyaml:
--python (default: scripts/python_env.sh build/venv, the Python tests' environment).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"

# Runs the vendored converter with one change: a BPE pre-tokenizer it does not know (mxmoe's
# stand-in tokenizer) is taken as gpt-4o's (o200k), gpt-oss's own, instead of stopping.
CONVERT_WRAPPER = r"""
import runpy, sys
src = sys.argv[1]
sys.path[:0] = [src, src + "/gguf-py"]
import conversion.base as base
known = base.TextModel.get_vocab_base_pre
def pre_tokenizer(self, tokenizer):
    try:
        return known(self, tokenizer)
    except NotImplementedError:
        print("whole_model_peers: unknown pre-tokenizer hash, taken as gpt-4o", file=sys.stderr)
        return "gpt-4o"
base.TextModel.get_vocab_base_pre = pre_tokenizer
sys.argv = [src + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    log("$ " + " ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def load_average() -> float:
    return os.getloadavg()[0]


def autogroup_note() -> str:
    """A warning when Linux's autogroup scheduling is on: then `nice` lowers a process's share
    only against its own session, so other sessions' "nice -n 19" builds still take their fair
    half of the CPUs from the engines (seen on the Zen 4 guest: a 2-thread layer ran at the
    speed of 1 thread). Empty when off or unknown."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled", encoding="utf-8") as f:
            enabled = f.read().strip() == "1"
    except OSError:
        return ""
    if not enabled:
        return ""
    return ("note: kernel.sched_autogroup_enabled=1: other sessions' nice'd work still takes its "
            "share of the CPUs; for timings, quiet the machine or run "
            "`sysctl kernel.sched_autogroup_enabled=0` (root)")


def nice(cmd: list) -> list:
    return ["nice", "-n", "10", *cmd]


def build(src: Path, targets: list[str], extra: list[str]) -> Path:
    out = src / "build"
    if all((out / "bin" / t).exists() for t in targets):
        return out / "bin"
    run(nice(["cmake", "-S", src, "-B", out, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
              "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
              "-DLLAMA_BUILD_SERVER=OFF", *extra]))
    run(nice(["ninja", "-C", out, "-j2", *targets]))
    return out / "bin"


def llama_cpp(work: Path) -> Path:
    """llama.cpp as llama-cpp-python 0.3.36 vendors it; returns its source directory."""
    sdist_dir = work / "sdist"
    src = work / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp"
    if not src.exists():
        sdist_dir.mkdir(parents=True, exist_ok=True)
        run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             LLAMA_CPP_PYTHON, "-d", sdist_dir])
        (tarball,) = sdist_dir.glob("llama_cpp_python-0.3.36.tar.gz")
        with tarfile.open(tarball) as t:
            t.extractall(work, filter="data")
    return src


def ik_llama_cpp(work: Path, git_dir: Path, commit: str) -> Path:
    """ik_llama.cpp at COMMIT, exported blob by blob from GIT_DIR (a mirror may lack its largest
    files: web-UI bundles and vocabulary test files, none of which llama-bench needs)."""
    src = work / "ik_llama.cpp"
    if src.exists():
        return src
    tree = subprocess.run(["git", "-C", git_dir, "ls-tree", "-r", commit], check=True,
                          capture_output=True, text=True).stdout.splitlines()
    cat = subprocess.Popen(["git", "-C", git_dir, "cat-file", "--batch"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE)
    missing = []
    tmp = work / "ik_llama.cpp.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    for row in tree:
        meta, path = row.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind != "blob":
            continue
        cat.stdin.write((sha + "\n").encode())
        cat.stdin.flush()
        header = cat.stdout.readline().decode().split()
        if header[1] == "missing":
            missing.append(path)
            continue
        data = cat.stdout.read(int(header[2]))
        cat.stdout.read(1)
        target = tmp / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            os.symlink(data.decode(), target)
        else:
            target.write_bytes(data)
            if mode == "100755":
                target.chmod(0o755)
    cat.stdin.close()
    cat.wait()
    if missing:
        log(f"ik_llama.cpp {commit}: {len(missing)} files absent from the mirror: {missing}")
    tmp.rename(src)
    return src


def make_gguf(args, llama_src: Path, llama_bin: Path) -> Path:
    gguf = args.work / "gguf" / "gpt-oss-20b-MXFP4_MOE.gguf"
    if gguf.exists():
        return gguf
    gguf.parent.mkdir(parents=True, exist_ok=True)
    bf16 = gguf.parent / "gpt-oss-20b-bf16.gguf"
    if not bf16.exists():  # written under another name first: a stopped run leaves no bf16 file
        wrapper = args.work / "convert_wrapper.py"
        wrapper.write_text(CONVERT_WRAPPER)
        partial = bf16.with_suffix(".partial")
        run(nice([args.python, wrapper, llama_src, args.model, "--outtype", "bf16",
                  "--outfile", partial]))
        partial.rename(bf16)
    partial = gguf.with_suffix(".partial")
    run(nice([llama_bin / "llama-quantize", bf16, partial, "MXFP4_MOE", str(args.threads)]))
    partial.rename(gguf)
    bf16.unlink()
    return gguf


def dram(args, tag: str) -> dict:
    out = subprocess.run([args.mxmoe, "bench", "--limits", "--threads", str(args.threads),
                          "--json"], check=True, capture_output=True, text=True).stdout
    m = json.loads(out)["machine"]
    return {"round": tag, "gbps": m["dram_gbps_all_threads"], "passes": m["dram_passes_all_threads"],
            "load": load_average()}


def file_tag(engine: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in engine)


def mxmoe_round(args, engine: str, tag: str, extra: list[str]) -> dict:
    cmd = [args.mxmoe, "bench", "--model", args.model, "--whole", "--pp", args.pp, "--tg", args.tg,
           "--batch", args.batch, "--reps", args.reps, "--threads", args.threads, "--json"]
    cmd += args.mxmoe_args + extra
    load = load_average()
    out = run(cmd, capture_output=True, text=True).stdout
    (args.results / f"{file_tag(engine)}-{tag}.json").write_text(out)
    j = json.loads(out)
    rows = {}
    for r in j["results"]:
        key = "pp" if r["kind"] == "prefill" else ("tg" if r["batch"] == 1 else f"tg x{r['batch']}")
        rows[key] = r["tok_s"]["samples"]
    return {"load": load, "samples": rows, "dram_gbps": j["dram"]["gbps_best"],
            "bytes_per_token": j["bytes_per_token"], "peak_rss_bytes": j["peak_rss_bytes"],
            "load_s": j["load_s"]}


def llama_bench_round(args, name: str, binary: Path, gguf: Path, tag: str, extra: list[str]) -> dict:
    cmd = [binary, "-m", gguf, "-p", args.pp, "-n", args.tg, "-t", args.threads, "-r", args.reps,
           "-o", "json", *extra]
    load = load_average()
    out = run(cmd, capture_output=True, text=True).stdout
    (args.results / f"{file_tag(name)}-{tag}.json").write_text(out)
    rows = {}
    for r in json.loads(out):
        key = "pp" if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0 else "tg"
        samples = r.get("samples_ts") or [r["avg_ts"]]
        rows[key] = samples
    return {"load": load, "samples": rows}


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=Path("/tmp/whole_model_peers"),
                   help="scratch directory: sources, builds, GGUFs, results (never the repository)")
    p.add_argument("--model", type=Path, help="mxmoe's gpt-oss-20b (default: WORK/gpt-oss-20b, "
                   "written by mxmoe synth --full when absent)")
    p.add_argument("--mxmoe", type=Path, default=ROOT / "build" / "mxmoe")
    p.add_argument("--python", type=Path, help="a Python with numpy, torch, transformers, "
                   "safetensors, pyyaml for the converter (default: scripts/python_env.sh build/venv)")
    p.add_argument("--ik-git", type=Path, default=Path("/work/.mirror/ikawrakow+ik_llama.cpp/repo"))
    p.add_argument("--ik-commit", default="8337e4c")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3, help="repetitions per engine per round")
    p.add_argument("--pp", type=int, default=512)
    p.add_argument("--tg", type=int, default=64)
    p.add_argument("--batch", default="1,8", help="mxmoe's decode batch sizes")
    p.add_argument("--engines", default="mxmoe,llama.cpp,ik_llama.cpp",
                   help="comma list; ENGINE:VARIANT as the description says")
    p.add_argument("--gguf", action="append", default=[], metavar="LABEL=PATH",
                   help="a GGUF that llama.cpp:LABEL and ik_llama.cpp:LABEL read (repeatable)")
    p.add_argument("--max-load", type=float, default=0,
                   help="wait (up to --wait-s) for a 1-minute load average below this before "
                   "each round; 0: do not wait")
    p.add_argument("--wait-s", type=float, default=1800)
    p.add_argument("--build-only", action="store_true", help="prepare everything, time nothing")
    p.add_argument("mxmoe_args", nargs="*", help="after --: more flags for mxmoe bench --whole")
    args = p.parse_args()
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    args.model = (args.model or args.work / "gpt-oss-20b").resolve()
    args.results = args.work / "results"
    args.results.mkdir(exist_ok=True)
    engines = args.engines.split(",")
    bases = {e.split(":", 1)[0] for e in engines}
    unknown = bases - {"mxmoe", "llama.cpp", "ik_llama.cpp"}
    if unknown:
        p.error(f"unknown engine(s) {sorted(unknown)}: mxmoe, llama.cpp, ik_llama.cpp")
    ggufs = {}
    for item in args.gguf:
        label, sep, path = item.partition("=")
        if not sep or not label or not Path(path).is_file():
            p.error(f"--gguf {item!r}: expected LABEL=PATH of an existing file")
        ggufs[label] = Path(path).resolve()
    for e in engines:
        base, _, variant = e.partition(":")
        if base != "mxmoe" and variant and variant not in ggufs:
            p.error(f"engine {e}: no --gguf {variant}=PATH")

    if not (args.model / "config.json").exists():
        run(nice([args.mxmoe, "synth", "--preset", "gpt-oss-20b", "--full", "--out", args.model]))
    llama_bin = ik_bin = gguf = None
    if "llama.cpp" in bases or "ik_llama.cpp" in bases:  # the GGUF needs llama-quantize
        llama_src = llama_cpp(args.work)
        llama_bin = build(llama_src, ["llama-bench", "llama-quantize"], ["-DGGML_OPENMP=ON"])
        if "ik_llama.cpp" in bases:
            ik_bin = build(ik_llama_cpp(args.work, args.ik_git, args.ik_commit), ["llama-bench"], [])
        if args.python is None:
            args.python = Path(subprocess.run(
                [ROOT / "scripts" / "python_env.sh", ROOT / "build" / "venv"], check=True,
                capture_output=True, text=True).stdout.strip())
        gguf = make_gguf(args, llama_src, llama_bin)
    if args.build_only:
        return 0

    for name in ("pp", "tg"):
        args.__dict__[name] = str(args.__dict__[name])
    args.threads, args.reps = str(args.threads), str(args.reps)
    record = {"cpu": None, "threads": args.threads, "rounds": [], "dram": []}
    def runner(engine: str, tag: str) -> dict:
        base, _, variant = engine.partition(":")
        if base == "mxmoe":
            return mxmoe_round(args, engine, tag, variant.split())
        file = ggufs[variant] if variant else gguf
        if base == "llama.cpp":
            return llama_bench_round(args, engine, llama_bin / "llama-bench", file, tag, [])
        return llama_bench_round(args, engine, ik_bin / "llama-bench", file, tag,
                                 ["-rtr", "1", "-fmoe", "1"])
    if note := autogroup_note():
        log(note)
    for r in range(int(args.rounds)):
        if args.max_load > 0:
            start = time.time()
            while load_average() >= args.max_load and time.time() - start < args.wait_s:
                time.sleep(20)
        order = engines[r % len(engines):] + engines[:r % len(engines)]
        record["dram"].append(dram(args, f"r{r + 1}"))
        for e in order:
            result = runner(e, f"r{r + 1}")
            result.update({"engine": e, "round": r + 1})
            record["rounds"].append(result)
            log(f"round {r + 1} {e}: load {result['load']:.2f} "
                + ", ".join(f"{k} {statistics.median(v):.2f} tok/s" for k, v in result["samples"].items()))
        record["dram"].append(dram(args, f"r{r + 1} end"))
    (args.results / "summary.json").write_text(json.dumps(record, indent=2))

    keys = ["pp", "tg"] + [f"tg x{b}" for b in args.batch.split(",") if b != "1"]
    print(f"\n{args.threads} threads, {args.rounds} rounds x {args.reps} reps, engines alternating; "
          f"median (min-max) tok/s over every sample\n")
    print("| engine | " + " | ".join(f"pp{args.pp}" if k == "pp" else k.replace("tg", f"tg{args.tg}")
                                      for k in keys) + " | load avg (1 min) |")
    print("|---|" + "---:|" * (len(keys) + 1))
    for e in engines:
        runs = [x for x in record["rounds"] if x["engine"] == e]
        cells = [spread([s for x in runs for s in x["samples"].get(k, [])]) for k in keys]
        loads = [x["load"] for x in runs]
        print(f"| {e} | " + " | ".join(cells) + f" | {min(loads):.2f}-{max(loads):.2f} |")
    gbps = [d["gbps"] for d in record["dram"]]
    for e in engines:
        mx = [x for x in record["rounds"] if x["engine"] == e and e.split(":")[0] == "mxmoe"]
        if not (mx and gbps):
            continue
        tg = statistics.median([s for x in mx for s in x["samples"].get("tg", [])])
        bpt = mx[0]["bytes_per_token"]
        print(f"\n{e}: a decoded token reads {bpt / 1e9:.2f} GB: {bpt * tg / 1e9:.1f} GB/s at the "
              f"median tg, {100 * bpt * tg / 1e9 / max(gbps):.0f}% of the best DRAM reading; peak RSS "
              f"{max(x['peak_rss_bytes'] for x in mx) / 1e9:.2f} GB; load {min(x['load_s'] for x in mx):.1f} s")
    print(f"\nDRAM read ({args.threads} threads, best pass of each measurement): "
          + ", ".join(f"{g:.1f}" for g in gbps) + " GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
