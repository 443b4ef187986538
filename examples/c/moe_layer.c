/* Runs one MoE layer of a checkpoint through the mxmoe C API.
 *
 *   mxmoe generate --preset gpt-oss-20b --experts 8 --hidden 256 --intermediate 256 --out tiny
 *   cc -std=c11 moe_layer.c $(pkg-config --cflags --libs mxmoe) -o moe_layer
 *   ./moe_layer tiny 0
 */
#include <mxmoe/mxmoe.h>
#include <stdio.h>
#include <stdlib.h>

static int check(mxmoe_status status, const char* what) {
  if (status == MXMOE_OK) return 0;
  fprintf(stderr, "%s failed (status %d): %s\n", what, (int)status, mxmoe_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s CHECKPOINT_DIR [LAYER]\n", argv[0]);
    return 2;
  }
  const int32_t layer_index = argc > 2 ? (int32_t)atoi(argv[2]) : 0;
  printf("mxmoe %s\n", mxmoe_version());

  mxmoe_checkpoint* checkpoint = NULL;
  if (check(mxmoe_checkpoint_open(argv[1], &checkpoint), "mxmoe_checkpoint_open")) return 1;

  /* Start from the defaults: fields may be added to the struct in later versions. */
  mxmoe_request_params params = mxmoe_request_default_params();
  params.activation = MXMOE_ACTIVATION_BF16;
  params.batch_invariant = true;
  params.tokens_hint = 4;

  mxmoe_layer* layer = NULL;
  mxmoe_status status = mxmoe_layer_create(checkpoint, layer_index, &params, &layer);
  mxmoe_checkpoint_close(checkpoint); /* the layer keeps what it needs */
  if (check(status, "mxmoe_layer_create")) return status == MXMOE_ERROR_NO_BACKEND ? 3 : 1;

  char* selection = NULL;
  if (check(mxmoe_layer_selection_json(layer, &selection), "mxmoe_layer_selection_json")) return 1;
  printf("selection: %.120s...\n", selection);
  mxmoe_free(selection);

  mxmoe_layer_info info = mxmoe_layer_info_default(); /* sets struct_size */
  if (check(mxmoe_layer_get_info(layer, &info), "mxmoe_layer_get_info")) return 1;
  const int64_t tokens = 4;
  float* x = malloc(sizeof(float) * (size_t)(tokens * info.hidden));
  float* y = malloc(sizeof(float) * (size_t)(tokens * info.hidden));
  if (x == NULL || y == NULL) return 1;
  for (int64_t i = 0; i < tokens * info.hidden; ++i) x[i] = (float)((i * 7919) % 17) / 8.0f - 1.0f;

  if (check(mxmoe_layer_forward_f32(layer, x, tokens, y), "mxmoe_layer_forward_f32")) return 1;
  double sum = 0;
  for (int64_t i = 0; i < tokens * info.hidden; ++i) sum += (double)y[i] * (double)y[i];
  printf("layer %d: E=%d top-%d H=%d I=%d; |y|^2 = %.6g over %lld tokens\n", (int)layer_index,
         (int)info.num_experts, (int)info.top_k, (int)info.hidden, (int)info.intermediate, sum,
         (long long)tokens);

  /* Errors are statuses, never crashes: a token routed twice to one expert is refused. */
  int32_t ids[2] = {0, 0};
  float weights[2] = {0.5f, 0.5f};
  status = mxmoe_layer_forward_routed_f32(layer, x, ids, weights, 1, y);
  printf("duplicate expert ids: status %d (%s)\n", (int)status, mxmoe_last_error());

  mxmoe_layer_destroy(layer);
  free(x);
  free(y);
  return status == MXMOE_ERROR_INVALID_ARGUMENT ? 0 : 1;
}
