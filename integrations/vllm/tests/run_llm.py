"""One vLLM engine, offline: the job given as JSON on the command line, the result as one JSON
line on stdout (the tests run it in a child process, with their environment).

  {"model": DIR, "prompts": [[ids...], ...], "max_tokens": 8, "dtype": "bfloat16",
   "logprobs": false}
"""

import json
import sys
import time


def main() -> int:
    job = json.loads(sys.argv[1])
    from vllm import LLM, SamplingParams  # noqa: PLC0415

    start = time.perf_counter()
    llm = LLM(model=job["model"], dtype=job.get("dtype", "bfloat16"), enforce_eager=True,
              skip_tokenizer_init=True, max_model_len=128, max_num_seqs=8,
              gpu_memory_utilization=0.15, seed=0)
    startup = time.perf_counter() - start
    params = SamplingParams(max_tokens=job.get("max_tokens", 8), temperature=0.0,
                            detokenize=False, logprobs=1 if job.get("logprobs") else None)
    outputs = llm.generate([{"prompt_token_ids": p} for p in job["prompts"]], params)
    result = {"startup_s": startup, "tokens": [], "logprobs": []}
    for out in outputs:
        completion = out.outputs[0]
        result["tokens"].append(list(completion.token_ids))
        if completion.logprobs:
            result["logprobs"].append([float(step[token].logprob).hex() for step, token
                                       in zip(completion.logprobs, completion.token_ids)])
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
