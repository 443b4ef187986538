"""One vLLM engine, offline, for several generate calls: the job as JSON on the command line,
the results as one JSON line on stdout after the marker MXMOE_RESULT (the tests run it in a child process, with the
environment of their case).

  {"model": DIR, "calls": [{"prompts": [[ids...], ...], "max_tokens": 8,
                            "logprobs": false, "prompt_logprobs": false}, ...],
   "llm": {...}}  (optional: more keyword arguments of vllm.LLM)

Per call: "tokens" (greedy, per prompt), "logprobs" (float.hex of each chosen token's
logprob), "prompt_logprobs" (per prompt position after the first, the logprob of the prompt's
own next token and the top-1 token there), "seconds" (the generate call's wall time), and
with MXMOE_VLLM_MOE_TIMES / MXMOE_VLLM_DENSE_TIMES set, "times": {"moe"/"dense": the calls,
tokens and seconds the plugin's timers counted during the call, in every engine process}.
"""

import gc
import json
import os
import sys
import time


def main() -> None:
    job = json.loads(sys.argv[1])
    from vllm import LLM, SamplingParams  # noqa: PLC0415

    start = time.perf_counter()
    llm = LLM(model=job["model"], dtype="bfloat16", enforce_eager=True, skip_tokenizer_init=True,
              max_model_len=128, max_num_seqs=8, gpu_memory_utilization=0.15, seed=0,
              **job.get("llm", {}))
    results = {"startup_s": time.perf_counter() - start, "calls": []}
    timers = {key: os.environ[variable] for key, variable in
              (("moe", "MXMOE_VLLM_MOE_TIMES"), ("dense", "MXMOE_VLLM_DENSE_TIMES"))
              if os.environ.get(variable)}
    if timers:
        from mxmoe_vllm import read_times  # noqa: PLC0415

        before = {key: read_times(path) for key, path in timers.items()}
    for call in job["calls"]:
        params = SamplingParams(max_tokens=call.get("max_tokens", 8), temperature=0.0,
                                detokenize=False, logprobs=1 if call.get("logprobs") else None,
                                prompt_logprobs=1 if call.get("prompt_logprobs") else None)
        t0 = time.perf_counter()
        outputs = llm.generate([{"prompt_token_ids": p} for p in call["prompts"]], params)
        r = {"tokens": [], "logprobs": [], "prompt_logprobs": [],
             "seconds": time.perf_counter() - t0}
        for prompt, out in zip(call["prompts"], outputs):
            completion = out.outputs[0]
            r["tokens"].append(list(completion.token_ids))
            if completion.logprobs:
                r["logprobs"].append([float(step[t].logprob).hex() for step, t
                                      in zip(completion.logprobs, completion.token_ids)])
            if out.prompt_logprobs:
                steps = []
                for position, step in enumerate(out.prompt_logprobs[1:], start=1):
                    own = step[prompt[position]].logprob
                    top = max(step.items(), key=lambda kv: kv[1].logprob)
                    steps.append([float(own), int(top[0])])
                r["prompt_logprobs"].append(steps)
        if timers:
            after = {key: read_times(path) for key, path in timers.items()}
            r["times"] = {key: {k: after[key][k] - before[key][k] for k in after[key]}
                          for key in timers}
            before = after
        results["calls"].append(r)
    print("MXMOE_RESULT " + json.dumps(results), flush=True)  # vLLM prints to stdout too
    del llm
    gc.collect()  # the engine's processes are stopped here (EngineCore and its worker exit)
    # Then the process ends without the interpreter's finalization. In about half the runs on
    # a 2-core machine it aborted there ("terminate called without an active exception",
    # SIGABRT) after its results: vLLM's output-handler thread (a Python daemon thread of this,
    # the front-end process) was still freeing a msgspec message holding logprob tensors;
    # torch's THPVariable_clear lets go of the GIL inside ~TensorImpl, and a daemon thread
    # that asks for the GIL back during finalization is ended by pthread_exit, whose forced
    # unwind through that noexcept destructor calls std::terminate (core dump, 2026-12-05:
    # Py_FinalizeEx on the main thread; THPVariable_clear -> take_gil -> PyThread_exit_thread
    # on the other). vLLM's and torch's teardown, not mxmoe's: mxmoe's layers live in the
    # worker process, which had exited cleanly. os._exit skips that teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
