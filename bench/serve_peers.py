#!/usr/bin/env python3
"""Serving gpt-oss-20b, side by side: `mxmoe serve` (default, --batch-invariant and --compact) and
llama.cpp's `llama-server` on the same weights, CPU and thread count, the same prompt set at 1,
4 and 16 concurrent clients, engines alternating (issue 36's benchmark).

    bench/serve_peers.py --work /tmp/peers --rounds 2 --threads 2

--work is whole_model_peers.py's: the checkpoint (gpt-oss-20b), the GGUF (gguf/) and the
llama.cpp sources vendored by llama-cpp-python==0.3.36, whose llama-server this script builds
there (-DLLAMA_BUILD_SERVER=ON, nice -n 10) when missing. Nothing of llama.cpp enters this
repository.

Each engine is started alone (the others stopped), on a free loopback port, with slots for 16
sequences of --context tokens; one warm-up request; then for each client count N, N threads
each send --requests-per-client streamed /v1/completions requests (distinct prompts of 12-28
words, 60-130 tokens, `max_tokens` --max-tokens, `ignore_eos`, temperature 0), read the server-sent events
raw, and time: the first token (TTFT, from the request's send), the gaps between tokens (ITL),
and the level's wall time. Reported per engine and N: aggregate output tokens/s (all tokens
over the level's wall time), TTFT p50/p99, ITL p50/p99; medians over rounds, min-max.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from whole_model_peers import load_average, log, run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEXT = (
    "The history of computing is a story of abstractions built on abstractions. Early machines "
    "were programmed by rewiring panels; stored programs made software a thing of its own. "
    "Compilers let people write in languages closer to their problems, operating systems shared "
    "one machine among many users, and networks joined machines into systems no single person "
    "could hold in mind. Each layer hid the one below, and each hid it imperfectly: memory "
    "hierarchies leak through caches, floating point leaks through rounding, and distributed "
    "systems leak through partial failure. Good engineers learn where the abstractions leak and "
    "measure before they believe. "
).split()


def prompts(count: int) -> list[str]:
    out = []
    for i in range(count):
        n = 12 + (i * 7) % 17  # 12-28 words: 60-130 tokens with the stand-in tokenizer
        start = (i * 13) % len(TEXT)
        words = [TEXT[(start + k) % len(TEXT)] for k in range(n)]
        out.append(f"Request {i}: " + " ".join(words))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port: int, proc: subprocess.Popen, bound: float = 600) -> None:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the server did not become healthy")


def stream_one(port: int, prompt: str, max_tokens: int) -> dict:
    # logprobs: every token is an event with its logprobs entry, even one whose text is empty (a
    # random-weight model's tokens are often ids the stand-in tokenizer has no text for).
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "ignore_eos": True, "logprobs": 1, "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    sent = time.monotonic()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
    times, usage, buf = [], None, b""
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        event = json.loads(data)
        if event.get("usage"):
            usage = event["usage"]
        now = time.monotonic()
        for choice in event.get("choices") or []:
            lp = choice.get("logprobs") or {}
            n = len(lp.get("tokens") or lp.get("content") or [])
            times += [now] * (n or (1 if choice.get("text") else 0))
    c.close()
    tokens = usage["completion_tokens"] if usage else len(times)
    return {"ttft": times[0] - sent if times else None,
            "itl": [b - a for a, b in zip(times, times[1:])], "tokens": tokens}


def level(port: int, clients: int, per_client: int, max_tokens: int, prompt_set: list[str]) -> dict:
    results, errors = [], []
    lock = threading.Lock()

    def client(i: int) -> None:
        for k in range(per_client):
            try:
                got = stream_one(port, prompt_set[(i * per_client + k) % len(prompt_set)], max_tokens)
                with lock:
                    results.append(got)
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(repr(e))

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    ttft = sorted(r["ttft"] for r in results if r["ttft"] is not None)
    itl = sorted(x for r in results for x in r["itl"])

    def pct(xs, p):
        return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else None

    tokens = sum(r["tokens"] for r in results)
    return {"clients": clients, "requests": len(results), "errors": errors, "wall_s": wall,
            "tokens": tokens, "tok_s": tokens / wall, "ttft_p50": pct(ttft, 0.5), "ttft_p99": pct(ttft, 0.99),
            "itl_p50": pct(itl, 0.5), "itl_p99": pct(itl, 0.99), "load_before": None}


def engines(a, gguf: Path, llama_server: Path) -> dict:
    mx = [str(a.mxmoe), "serve", "--model", str(a.model), "--threads", str(a.threads), "--max-batch",
          str(max(a.clients)), "--max-context", str(a.context), "--quiet", *a.mxmoe_args.split()]
    out = {
        "mxmoe": lambda port: mx + ["--port", str(port)],
        "mxmoe-invariant": lambda port: mx + ["--port", str(port), "--batch-invariant"],
        # The 8-bit mode, as llama-server's GGUF runs: Q8-like attention and head, int8
        # activations in the experts.
        "mxmoe-compact": lambda port: mx + ["--port", str(port), "--compact"],
        "mxmoe-compact-invariant": lambda port: mx + ["--port", str(port), "--compact",
                                                      "--batch-invariant"],
    }
    if llama_server.exists():
        n = max(a.clients)
        out["llama-server"] = lambda port: [str(llama_server), "-m", str(gguf), "-t", str(a.threads), "-tb",
                                            str(a.threads), "-np", str(n), "-c", str(n * a.context),
                                            "--port", str(port), "--host", "127.0.0.1"]
    return {k: v for k, v in out.items() if k in a.engines}


def build_llama_server(work: Path) -> Path:
    src = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"), None)
    if src is None:
        raise SystemExit(f"no llama.cpp sources under {work}: run bench/whole_model_peers.py first")
    binary = src / "build" / "bin" / "llama-server"
    if not binary.exists():
        run(["nice", "-n", "10", "cmake", "-S", src, "-B", src / "build", "-DLLAMA_BUILD_SERVER=ON"],
            stdout=subprocess.DEVNULL)
        run(["nice", "-n", "10", "cmake", "--build", src / "build", "--target", "llama-server", "-j2"],
            stdout=subprocess.DEVNULL)
    return binary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=Path("/tmp/peers"))
    p.add_argument("--model", type=Path, help="checkpoint (default WORK/gpt-oss-20b)")
    p.add_argument("--gguf", type=Path, help="GGUF (default WORK/gguf/gpt-oss-20b-MXFP4_MOE.gguf)")
    p.add_argument("--mxmoe", type=Path, default=ROOT / "build" / "mxmoe")
    p.add_argument("--engines", default="mxmoe,mxmoe-invariant,mxmoe-compact,llama-server")
    p.add_argument("--clients", default="1,4,16")
    p.add_argument("--requests-per-client", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--mxmoe-args", default="", help="more arguments for every mxmoe engine, "
                   "e.g. \"--prefill-chunk 64\" (one string)")
    a = p.parse_args()
    a.model = a.model or a.work / "gpt-oss-20b"
    gguf = a.gguf or a.work / "gguf" / "gpt-oss-20b-MXFP4_MOE.gguf"
    a.clients = [int(x) for x in a.clients.split(",")]
    a.engines = a.engines.split(",")
    llama_server = build_llama_server(a.work) if "llama-server" in a.engines else Path("/nonexistent")
    commands = engines(a, gguf, llama_server)
    prompt_set = prompts(64)
    results_dir = a.work / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    samples: dict[tuple[str, int], list[dict]] = {}
    names = list(commands)
    for r in range(a.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            port = free_port()
            log(f"round {r + 1}: {name} (load {load_average():.2f})")
            proc = subprocess.Popen(commands[name](port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                t0 = time.monotonic()
                wait_healthy(port, proc)
                log(f"  ready in {time.monotonic() - t0:.1f} s")
                stream_one(port, "Warm up.", 4)
                for n in a.clients:
                    before = load_average()
                    got = level(port, n, a.requests_per_client, a.max_tokens, prompt_set)
                    got["load_before"] = before
                    samples.setdefault((name, n), []).append(got)
                    log(f"  {n:2d} clients: {got['tok_s']:.2f} tok/s, TTFT p50/p99 {got['ttft_p50']} / "
                        f"{got['ttft_p99']} s, ITL p50/p99 {got['itl_p50']} / {got['itl_p99']} s, "
                        f"errors {len(got['errors'])} {got['errors'][:1]}")
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    raw = results_dir / f"serve-{stamp}.json"
    raw.write_text(json.dumps({f"{k[0]}@{k[1]}": v for k, v in samples.items()}, indent=1))

    def cell(xs, scale=1.0, fmt="{:.2f}"):
        xs = [x * scale for x in xs if x is not None]
        if not xs:
            return "-"
        med = statistics.median(xs)
        return fmt.format(med) + (f" ({fmt.format(min(xs))}-{fmt.format(max(xs))})" if len(xs) > 1 else "")

    print(f"| engine | clients | output tok/s | TTFT p50 s | TTFT p99 s | ITL p50 ms | ITL p99 ms | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for (name, n), runs in samples.items():
        print(f"| {name} | {n} | {cell([x['tok_s'] for x in runs])} | {cell([x['ttft_p50'] for x in runs])} | "
              f"{cell([x['ttft_p99'] for x in runs])} | {cell([x['itl_p50'] for x in runs], 1000, '{:.0f}')} | "
              f"{cell([x['itl_p99'] for x in runs], 1000, '{:.0f}')} | {sum(len(x['errors']) for x in runs)} |")
    log(f"raw samples: {raw}")


if __name__ == "__main__":
    main()
