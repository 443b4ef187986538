/* mxmoe_layer_create_from_tensors called from C (see from_tensors_c.h). */
#include <stddef.h>

#include "from_tensors_c.h"

static mxmoe_tensor tensor3(const void* data, mxmoe_dtype dtype, int64_t a, int64_t b, int64_t c) {
  mxmoe_tensor t = {data, dtype, 3, {a, b, c, 0}};
  return t;
}

static mxmoe_tensor tensor2(const void* data, mxmoe_dtype dtype, int64_t a, int64_t b) {
  mxmoe_tensor t = {data, dtype, 2, {a, b, 0, 0}};
  return t;
}

static mxmoe_tensor tensor1(const void* data, mxmoe_dtype dtype, int64_t a) {
  mxmoe_tensor t = {data, dtype, 1, {a, 0, 0, 0}};
  return t;
}

mxmoe_status c_gpt_oss_layer(const c_gpt_oss_tensors* g, c_caller caller,
                             const mxmoe_request_params* params, mxmoe_layer** out) {
  const int64_t e = g->experts, h = g->hidden, i = g->intermediate;
  mxmoe_layer_tensors t = mxmoe_layer_tensors_default();
  t.family = "gpt_oss";
  t.top_k = g->top_k;
  t.w13_blocks = tensor3(g->w13_blocks, MXMOE_DTYPE_U8, e, 2 * i, h / 2);
  t.w13_scales = tensor3(g->w13_scales, MXMOE_DTYPE_U8, e, 2 * i, h / 32);
  t.w2_blocks = tensor3(g->w2_blocks, MXMOE_DTYPE_U8, e, h, i / 2);
  t.w2_scales = tensor3(g->w2_scales, MXMOE_DTYPE_U8, e, h, i / 32);
  t.w13_bias = tensor2(g->w13_bias, g->dense_dtype, e, 2 * i);
  t.w2_bias = tensor2(g->w2_bias, g->dense_dtype, e, h);
  if (g->router_weight != NULL) {
    t.router_weight = tensor2(g->router_weight, g->dense_dtype, e, h);
    t.router_bias = tensor1(g->router_bias, g->dense_dtype, e);
  }
  if (caller == C_CALLER_OLD) {
    t.struct_size = offsetof(mxmoe_layer_tensors, activation_fn);
    t.activation_fn = "not an activation";
    t.alpha = -1.0f;
    t.limit = -1.0f;
    t.routing = "not a routing";
    t.renormalize = 7;
    t.routed_scaling_factor = -3.0f;
    t.n_group = -5;
    t.topk_group = -5;
    t.expert_bias = 9;
  }
  return mxmoe_layer_create_from_tensors(&t, params, NULL, out);
}
