/* mxmoe C API (C11): MoE layers with MXFP4 expert weights, for engines that embed mxmoe.
 *
 * Conventions (docs/C_API.md has a complete example):
 * - Handles are opaque; every call that can fail returns an mxmoe_status and writes its
 *   results through out-parameters. On failure the out-parameters are left unchanged and
 *   mxmoe_last_error() holds the reason, for the calling thread, until its next failing call.
 * - Parameter structs are obtained by value from *_default_params(): fields are only ever
 *   appended, so code that starts from the defaults keeps compiling. Enums are append-only.
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
  MXMOE_ERROR_INTERNAL = 5 /* a bug in mxmoe: please report the last_error text */
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
  mxmoe_activation activation;
  bool batch_invariant;          /* bit-identical output per token whatever the batch */
  int32_t threads;               /* 0: every logical CPU; else 1..1024 */
  const char* backend;           /* NULL or "": the oracle chooses; else force this backend */
  const char* excluded_backends; /* NULL, or a comma-separated list of backend names */
  int32_t tokens_hint;           /* expected tokens per call (ranks backends by cost); >= 1 */
  int32_t ep_size; /* expert-parallel group size: a layer holds and packs 1/ep_size of the */
  int32_t ep_rank; /* experts and refuses forward (use mxmoe_ep_layer_create for a group) */
} mxmoe_request_params;

/* Shape of a layer. */
typedef struct mxmoe_layer_info {
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

/* The defaults. At mxmoe_layer_create, a field left at its default takes the MXMOE_* variable
 * where one is set (README; parsed by the library as the mxmoe command does); a field set by
 * the caller wins. A bad variable is MXMOE_ERROR_INVALID_ARGUMENT naming it. */
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
  int32_t rank, size; /* this rank, and the group size (the EP size) */
  mxmoe_exchange_fn exchange;
  void* context; /* passed to exchange; must outlive the layer */
} mxmoe_communicator;

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
