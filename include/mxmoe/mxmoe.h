/* mxmoe C API (C11): MoE layers with MXFP4 expert weights, for engines that embed mxmoe.
 *
 * Conventions (docs/C_API.md has a complete example):
 * - Handles are opaque; every call that can fail returns an mxmoe_status and writes its
 *   results through out-parameters. On failure the out-parameters are left unchanged and
 *   mxmoe_last_error() holds the reason, for the calling thread, until its next failing call.
 * - The parameter structs (mxmoe_request_params, mxmoe_layer_tensors, mxmoe_communicator, and
 *   mxmoe_layer_info, which the library fills) open with struct_size, set by their *_default*()
 *   function (the sizeof of the caller's header): the library reads and writes only the fields
 *   within struct_size bytes, so a program built against an older header (a shorter struct)
 *   keeps working, its missing fields at their defaults; struct_size 0 is refused. Fields are
 *   only ever appended; enums too. mxmoe_tensor and mxmoe_message are fixed as they are.
 * - Every forward call checks its arrays at the boundary: NaN/Inf in x, expert ids out of range
 *   or repeated, routing weights not finite or negative, an output overlapping any input are
 *   MXMOE_ERROR_INVALID_ARGUMENT; an output holding NaN/Inf is MXMOE_ERROR_NON_FINITE (y then
 *   holds what was computed). Each message names the tokens (docs/RELIABILITY.md).
 * - No C++ exception ever crosses this boundary.
 * - Strings returned through char** are allocated by mxmoe and freed with mxmoe_free().
 * - Threads: a layer must not be called from two threads at once; different layers may be.
 *   Layers of one checkpoint created with the same thread count share one thread pool.
 */
#ifndef MXMOE_MXMOE_H
#define MXMOE_MXMOE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mxmoe/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The values of the failure statuses equal the mxmoe command's exit codes for the same failure
 * where one exists: 1 = a file's problem, 2 = the caller's value (a flag for the command, an
 * argument, parameter or MXMOE_* variable here), 3 = no backend fits. */
typedef enum mxmoe_status {
  MXMOE_OK = 0,
  MXMOE_ERROR_IO = 1,               /* a file is missing, unreadable or malformed */
  MXMOE_ERROR_INVALID_ARGUMENT = 2, /* a null pointer, a value out of range, bad JSON */
  MXMOE_ERROR_NO_BACKEND = 3,       /* no backend supports the deployment: see last_error */
  MXMOE_ERROR_OUT_OF_MEMORY = 4,
  MXMOE_ERROR_INTERNAL = 5, /* a bug in mxmoe: please report the last_error text */
  /* The output holds NaN/Inf (a legal checkpoint can overflow float32: an E8M0 scale of 254,
   * routing weights near the float range); last_error names the count and the tokens, as the
   * command's exit code 1 does. */
  MXMOE_ERROR_NON_FINITE = 6
} mxmoe_status;

/* The format activations are rounded to before each expert GEMM (docs/FORMATS.md). */
typedef enum mxmoe_activation {
  MXMOE_ACTIVATION_DEFAULT = 0, /* the model family's preference */
  MXMOE_ACTIVATION_F32 = 1,
  MXMOE_ACTIVATION_BF16 = 2,
  MXMOE_ACTIVATION_INT8 = 3,
  MXMOE_ACTIVATION_MXFP8 = 4
} mxmoe_activation;

typedef struct mxmoe_checkpoint mxmoe_checkpoint;
typedef struct mxmoe_layer mxmoe_layer;

/* What the caller asks of a layer; the oracle picks the fastest backend that satisfies it. */
typedef struct mxmoe_request_params {
  size_t struct_size; /* sizeof(mxmoe_request_params) of the caller's header */
  mxmoe_activation activation;
  bool batch_invariant;          /* bit-identical output per token whatever the batch */
  int32_t threads;               /* 0: every logical CPU; else 1..1024 */
  const char* backend;           /* NULL or "": the oracle chooses; else force this backend */
  const char* excluded_backends; /* NULL, or a comma-separated list of backend names */
  int32_t tokens_hint;           /* expected tokens per call (ranks backends by cost); >= 1 */
  int32_t ep_size; /* expert-parallel group size: a layer holds and packs 1/ep_size of the */
  int32_t ep_rank; /* experts and refuses forward (use mxmoe_ep_layer_create for a group) */
} mxmoe_request_params;

/* Shape of a layer: set struct_size (mxmoe_layer_info_default() does) before passing it to
 * *_get_info, which writes only the fields within it. */
typedef struct mxmoe_layer_info {
  size_t struct_size; /* sizeof(mxmoe_layer_info) of the caller's header */
  int32_t num_experts;
  int32_t top_k;
  int32_t hidden;                   /* H: x and y are [tokens, H] */
  int32_t intermediate;             /* I, per expert */
  int32_t expert_begin, expert_end; /* the routed experts this layer holds */
} mxmoe_layer_info;

/* "0.1.0" */
MXMOE_API const char* mxmoe_version(void);

/* The reason of the calling thread's last failure ("" if none). For MXMOE_ERROR_NO_BACKEND it
 * is the full report: every backend with every reason, and the suggestions. */
MXMOE_API const char* mxmoe_last_error(void);

/* Frees a string returned by mxmoe (NULL is ignored). */
MXMOE_API void mxmoe_free(void* p);

/* Opens a checkpoint directory (config.json + safetensors, mapped, headers only). */
MXMOE_API mxmoe_status mxmoe_checkpoint_open(const char* dir, mxmoe_checkpoint** out);
/* Closes the handle; layers created from it stay valid (they keep the mapping alive). */
MXMOE_API void mxmoe_checkpoint_close(mxmoe_checkpoint* checkpoint);
/* Number of decoder layers, and whether layer N is a MoE layer mxmoe runs. */
MXMOE_API mxmoe_status mxmoe_checkpoint_num_layers(const mxmoe_checkpoint* checkpoint,
                                                   int32_t* out);
MXMOE_API mxmoe_status mxmoe_checkpoint_is_moe_layer(const mxmoe_checkpoint* checkpoint,
                                                     int32_t layer, bool* out);

/* struct_size = sizeof(mxmoe_layer_info), every field 0. */
MXMOE_API mxmoe_layer_info mxmoe_layer_info_default(void);

/* The defaults, struct_size set. At mxmoe_layer_create, a field left at its default takes the
 * MXMOE_* variable where one is set (README; parsed by the library as the mxmoe command does);
 * a field set by the caller wins. A bad variable is MXMOE_ERROR_INVALID_ARGUMENT naming it. */
MXMOE_API mxmoe_request_params mxmoe_request_default_params(void);

/* Binds MoE layer N: validates its tensors, judges every backend on this machine (the probe,
 * capped by MXMOE_MAX_ISA) and packs the weights for the chosen one. */
MXMOE_API mxmoe_status mxmoe_layer_create(mxmoe_checkpoint* checkpoint, int32_t layer,
                                          const mxmoe_request_params* params, mxmoe_layer** out);
MXMOE_API void mxmoe_layer_destroy(mxmoe_layer* layer);
MXMOE_API mxmoe_status mxmoe_layer_get_info(const mxmoe_layer* layer, mxmoe_layer_info* out);

/* y[tokens, H] = the layer's output for x[tokens, H] (row-major), routed by its own router.
 * A hash-routed layer (DeepSeek-V4's first layers, mxmoe_layer_vocab > 0) needs the tokens'
 * ids: it fails here with MXMOE_ERROR_INVALID_ARGUMENT; use mxmoe_layer_forward_tokens_f32. */
MXMOE_API mxmoe_status mxmoe_layer_forward_f32(mxmoe_layer* layer, const float* x, int64_t tokens,
                                               float* y);
/* The same with the tokens' ids [tokens] (the model's input ids): a hash layer's experts are
 * its table's row of the token (ids outside [0, vocab) fail, naming the token); other layers
 * ignore them (token_ids may be NULL for them), so an engine can pass ids to every layer. */
MXMOE_API mxmoe_status mxmoe_layer_forward_tokens_f32(mxmoe_layer* layer, const float* x,
                                                      const int32_t* token_ids, int64_t tokens,
                                                      float* y);
MXMOE_API mxmoe_status mxmoe_layer_forward_tokens_bf16(mxmoe_layer* layer, const uint16_t* x,
                                                       const int32_t* token_ids, int64_t tokens,
                                                       uint16_t* y);
/* The token-id range of a hash-routed layer (its vocabulary size), 0 for other layers. */
MXMOE_API mxmoe_status mxmoe_layer_vocab(const mxmoe_layer* layer, int32_t* out);
/* Routing given by the caller (the fused-experts convention of vLLM and SGLang): topk_ids and
 * topk_weights are [tokens, top_k]; ids in [0, num_experts) and distinct per token. */
MXMOE_API mxmoe_status mxmoe_layer_forward_routed_f32(mxmoe_layer* layer, const float* x,
                                                      const int32_t* topk_ids,
                                                      const float* topk_weights, int64_t tokens,
                                                      float* y);
/* The same with bf16 input and output (raw uint16_t bits), computed in float32 inside. */
MXMOE_API mxmoe_status mxmoe_layer_forward_bf16(mxmoe_layer* layer, const uint16_t* x,
                                                int64_t tokens, uint16_t* y);
MXMOE_API mxmoe_status mxmoe_layer_forward_routed_bf16(mxmoe_layer* layer, const uint16_t* x,
                                                       const int32_t* topk_ids,
                                                       const float* topk_weights, int64_t tokens,
                                                       uint16_t* y);

/* ---- A layer from tensors the host holds (an engine's own expert weights, as vLLM and SGLang
 * keep them) instead of a checkpoint: docs/C_API.md maps their tensors to these fields. */

typedef enum mxmoe_dtype {
  MXMOE_DTYPE_UNSET = 0, /* an error for a tensor that is given */
  MXMOE_DTYPE_U8 = 1,    /* MXFP4 blocks and E8M0 scales */
  MXMOE_DTYPE_F32 = 2,
  MXMOE_DTYPE_BF16 = 3 /* uint16_t bit patterns */
} mxmoe_dtype;

/* A row-major, dense tensor in the caller's memory: data holds every element of shape[0..ndim)
 * in order (f32 and bf16 data aligned to their element size). data == NULL: not given. */
typedef struct mxmoe_tensor {
  const void* data;
  mxmoe_dtype dtype;
  int32_t ndim; /* 1..4 */
  int64_t shape[4];
} mxmoe_tensor;

/* The order of gate and up rows in a fused w13 (the first projection, 2I rows per expert). */
typedef enum mxmoe_gate_up {
  MXMOE_GATE_UP_DEFAULT = 0,     /* the family's: interleaved for gpt_oss, halves for the others */
  MXMOE_GATE_UP_INTERLEAVED = 1, /* even rows gate, odd rows up (gpt-oss; vLLM's CPU MXFP4 w13) */
  MXMOE_GATE_UP_HALVES = 2       /* rows [0, I) gate, [I, 2I) up (SGLang's and vLLM's other w13) */
} mxmoe_gate_up;

/* What a layer from tensors is made of. Obtain it from mxmoe_layer_tensors_default(), which
 * sets struct_size: the library reads only the fields that lie within struct_size bytes (a
 * caller built against an older header passes a smaller size; the fields it lacks keep their
 * defaults), and refuses a larger size whose extra bytes are not all zero (fields of a newer
 * header this library does not know). Fields are only ever appended.
 *
 * The math is the family's (routing, activation with alpha and limit, biases, gate/up layout;
 * docs/C_API.md has the table); the fields after selection_bias override single parts of it,
 * their defaults leaving it. E, H and I come from the tensors' shapes; top_k is the caller's.
 *
 * MXFP4 tensors are uint8: byte j of a 32-element block holds element 2j in its low nibble,
 * 2j+1 in its high nibble; a scale is an E8M0 exponent, 2^(s-127) (0xFF, NaN, is refused). */
typedef struct mxmoe_layer_tensors {
  size_t struct_size; /* sizeof(mxmoe_layer_tensors) of the caller's header */
  const char* family; /* "gpt_oss", "qwen3_moe", "mixtral", "deepseek_v3" or "deepseek_v4" */
  int32_t top_k;      /* experts per token (forward_routed's ids are [tokens, top_k]) */
  mxmoe_gate_up gate_up;
  /* Fused: w13_blocks [E, 2I, H/2] or [E, 2I, H/32, 16], w13_scales [E, 2I, H/32];
   * w2_blocks [E, H, I/2] or [E, H, I/32, 16], w2_scales [E, H, I/32]. */
  mxmoe_tensor w13_blocks, w13_scales, w2_blocks, w2_scales;
  /* Or per expert (DeepSeek's checkpoints), instead of the four above: arrays of num_experts
   * tensors each. w1 (gate) and w3 (up) blocks [I, H/2] or [I, H/32, 16], scales [I, H/32];
   * w2 (down) blocks [H, I/2] or [H, I/32, 16], scales [H, I/32]. Messages name expert e's
   * tensors w1_blocks[e], ..., w2_blocks[e] and w2_scales[e]. */
  int32_t num_experts; /* 0: the fused layout */
  const mxmoe_tensor* w1_blocks;
  const mxmoe_tensor* w1_scales;
  const mxmoe_tensor* w3_blocks;
  const mxmoe_tensor* w3_scales;
  const mxmoe_tensor* w2_expert_blocks;
  const mxmoe_tensor* w2_expert_scales;
  /* f32 or bf16, as the family has them: w13_bias [E, 2I] (rows as w13's), w2_bias [E, H];
   * router_weight [E, H] (without it the layer runs only the forward_routed calls),
   * router_bias [E] and selection_bias [E] (DeepSeek's e_score_correction_bias) with it. */
  mxmoe_tensor w13_bias, w2_bias, router_weight, router_bias, selection_bias;
  /* Overrides of the family's math. */
  const char* activation_fn;   /* NULL, or "swiglu_oai", "silu_glu", "silu_glu_clamp" */
  float alpha;                 /* 0: the family's (swiglu_oai only) */
  float limit;                 /* 0: the family's (swiglu_oai, silu_glu_clamp) */
  const char* routing;         /* NULL, or "topk_softmax", "softmax_topk", "sigmoid_group_topk",
                                  "sqrtsoftplus_topk" */
  int32_t renormalize;         /* -1: the family's; 0 or 1 */
  float routed_scaling_factor; /* 0: the family's */
  int32_t n_group, topk_group; /* 0: the family's (1: no group limit) */
  int32_t expert_bias;         /* -1: the family's; 0 or 1 (whether w13_bias/w2_bias exist) */
} mxmoe_layer_tensors;

/* The defaults: struct_size = sizeof(mxmoe_layer_tensors), every tensor absent, every override
 * at "the family's". */
MXMOE_API mxmoe_layer_tensors mxmoe_layer_tensors_default(void);

/* Builds a layer on the caller's tensors: checks every tensor's dtype and shape (the message
 * names the tensor and the numbers), validates them as a checkpoint's layer is validated (the
 * same bounds; a 0xFF scale, a non-finite bias or router value refused), judges every backend
 * on this machine and packs for the chosen one. share_pool_with: NULL, or a layer whose machine
 * (the probe and the thread pools) the new one shares: layers created with the same
 * params->threads then compute on one pool, as the layers of one checkpoint handle do.
 * The tensors' memory must outlive the layer while mxmoe_layer_reads_source_weights says true;
 * when it says false, the backend packed its own copy and the host may free its tensors as soon
 * as this call returns. */
MXMOE_API mxmoe_status mxmoe_layer_create_from_tensors(const mxmoe_layer_tensors* tensors,
                                                       const mxmoe_request_params* params,
                                                       const mxmoe_layer* share_pool_with,
                                                       mxmoe_layer** out);

/* Whether the layer reads the weights it was made from while it computes (a backend that
 * computes from them, the reference; a hash-routed layer's table): true means the tensors (or
 * the checkpoint's mapping, which a layer keeps alive itself) must outlive it. */
MXMOE_API mxmoe_status mxmoe_layer_reads_source_weights(const mxmoe_layer* layer, bool* out);

/* The oracle's selection for this layer as JSON (the form of `mxmoe explain --json`'s
 * "selection"); free with mxmoe_free. */
MXMOE_API mxmoe_status mxmoe_layer_selection_json(const mxmoe_layer* layer, char** json);

/* Judges a deployment given as JSON (a Deployment: {"layer", "hardware", "request"}, e.g. one
 * saved on another machine) and returns the selection as JSON. When no backend fits, returns
 * MXMOE_ERROR_NO_BACKEND and still fills *selection_json (every reason is in it). */
MXMOE_API mxmoe_status mxmoe_explain_json(const char* deployment_json, char** selection_json);

/* ---- Expert parallelism (docs/DISTRIBUTED.md): a layer whose routed experts are spread over
 * the ranks of a group the host already runs (MPI, its own transport). The host supplies the
 * transport as one callback; outputs have the bits of one process for any group size. */

/* One message of an exchange: bytes to or from `peer` (this rank itself included). */
typedef struct mxmoe_message {
  int32_t peer;
  void* data; /* read for a send, written for a receive */
  size_t bytes;
} mxmoe_message;

/* Sends and receives this round's messages, every rank calling it alike (collective). The
 * messages between two ranks are matched in the order both list them, and each receive names
 * exactly the size sent. Returns 0 when every message is done; else non-zero after writing a
 * reason naming the rank at fault into error[error_size] (NUL-terminated). It must return
 * within the host's deadline: a peer that never answers is the callback's to give up on. */
typedef int (*mxmoe_exchange_fn)(void* context, const mxmoe_message* sends, size_t num_sends,
                                 const mxmoe_message* recvs, size_t num_recvs, char* error,
                                 size_t error_size);

typedef struct mxmoe_communicator {
  size_t struct_size; /* sizeof(mxmoe_communicator) of the caller's header */
  int32_t rank, size; /* this rank, and the group size (the EP size) */
  mxmoe_exchange_fn exchange;
  void* context; /* passed to exchange; must outlive the layer */
} mxmoe_communicator;

/* struct_size set, rank 0 of a group of 1, no callback. */
MXMOE_API mxmoe_communicator mxmoe_communicator_default(void);

typedef struct mxmoe_ep_layer mxmoe_ep_layer;

/* Collective: every rank of the group calls it with the same checkpoint layer and params
 * (params.ep_size and ep_rank are ignored: the communicator's are used). Binds this rank's
 * experts of MoE layer N (contiguous ranges, as even as possible; only their pages are read),
 * and the group agrees on one backend: MXMOE_ERROR_NO_BACKEND when none runs on every rank,
 * with every rank's reasons in last_error. A failed exchange is MXMOE_ERROR_IO with the
 * callback's reason. */
MXMOE_API mxmoe_status mxmoe_ep_layer_create(mxmoe_checkpoint* checkpoint, int32_t layer,
                                             const mxmoe_request_params* params,
                                             const mxmoe_communicator* communicator,
                                             mxmoe_ep_layer** out);
MXMOE_API void mxmoe_ep_layer_destroy(mxmoe_ep_layer* layer);
MXMOE_API mxmoe_status mxmoe_ep_layer_get_info(const mxmoe_ep_layer* layer, mxmoe_layer_info* out);
/* Collective: every rank calls it once per layer call with its own tokens x[tokens, H]
 * (tokens may be 0: the rank only serves its experts) and gets their outputs y[tokens, H]. A
 * failed exchange is MXMOE_ERROR_IO, and the layer is unusable afterwards (destroy it). */
MXMOE_API mxmoe_status mxmoe_ep_layer_forward_f32(mxmoe_ep_layer* layer, const float* x,
                                                  int64_t tokens, float* y);
/* The same with this rank's tokens' ids [tokens], which a hash-routed layer (DeepSeek-V4's
 * first layers) routes by, as mxmoe_layer_forward_tokens_f32 (NULL for other layers). */
MXMOE_API mxmoe_status mxmoe_ep_layer_forward_tokens_f32(mxmoe_ep_layer* layer, const float* x,
                                                         const int32_t* token_ids, int64_t tokens,
                                                         float* y);

#ifdef __cplusplus
}
#endif

#endif /* MXMOE_MXMOE_H */
