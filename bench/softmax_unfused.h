// The "before" of the fused softmax: the chain PyTorch eager runs for
// softmax(scale * x masked_fill(causal, -inf)), as three kernels and three
// full passes through memory. Benchmark code only (compiled into the minfer
// CLI when CUDA is on), never part of libminfer.
#ifndef MF_BENCH_SOFTMAX_UNFUSED_H
#define MF_BENCH_SOFTMAX_UNFUSED_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// x, tmp, y: (rows, cols) contiguous, dtype dt (mf_dtype: f32, f16 or bf16),
// rows = batch * heads * q_len; mask: (q_len, cols) bytes, nonzero = masked
// (a materialised causal mask, broadcast over batch and heads), or NULL.
//   tmp = x * scale;  tmp[mask] = -inf;  y = softmax(tmp)
// Queued on `stream` (a cudaStream_t). Returns a cudaError_t (0 = success).
int mf_bench_softmax_unfused(void *stream, int dt, const void *x, void *tmp, void *y, const uint8_t *mask,
                             int64_t rows, int64_t q_len, int64_t cols, float scale);

#ifdef __cplusplus
}
#endif
#endif // MF_BENCH_SOFTMAX_UNFUSED_H
