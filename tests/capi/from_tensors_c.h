/* The C half of tests/capi's layer-from-tensors tests: mxmoe_layer_tensors filled in by C code
 * (compiled as strict C11), as a C engine fills it. */
#ifndef MXMOE_TESTS_CAPI_FROM_TENSORS_C_H
#define MXMOE_TESTS_CAPI_FROM_TENSORS_C_H

#include <stdint.h>

#include "mxmoe/mxmoe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A gpt-oss layer's fused tensors: w13 interleaved [E, 2I, H/2] + [E, 2I, H/32], w2
 * [E, H, I/2] + [E, H, I/32], biases [E, 2I] / [E, H] and the router [E, H] + [E] in
 * dense_dtype (router_weight NULL: no router). */
typedef struct c_gpt_oss_tensors {
  const uint8_t* w13_blocks;
  const uint8_t* w13_scales;
  const uint8_t* w2_blocks;
  const uint8_t* w2_scales;
  const void* w13_bias;
  const void* w2_bias;
  const void* router_weight;
  const void* router_bias;
  mxmoe_dtype dense_dtype;
  int32_t experts, hidden, intermediate, top_k;
} c_gpt_oss_tensors;

/* How the struct reaches the library. */
typedef enum c_caller {
  C_CALLER_CURRENT = 0, /* mxmoe_layer_tensors_default(), this header's size */
  /* A caller built against a header whose struct ended at selection_bias: struct_size says so,
   * and the bytes after it (the overrides of this header) hold garbage that must not be read. */
  C_CALLER_OLD = 1
} c_caller;

mxmoe_status c_gpt_oss_layer(const c_gpt_oss_tensors* t, c_caller caller,
                             const mxmoe_request_params* params, mxmoe_layer** out);

#ifdef __cplusplus
}
#endif

#endif
