/*
 * qkernels.h — matrix-vector and small-batch matrix products computed directly on
 * block-quantised weights (Q8_0, Q4_0, Q2_K..Q6_K, MXFP4), never dequantising the matrix.
 *
 * Contract with eng_matmul (src/engine/matmul.c), which dispatches here for every dtype
 * where eng_qsupported() is 1:
 *   - W is rows × cols, row-major: row r is cols / block_elems consecutive blocks starting
 *     at W + r · row_bytes, row_bytes = cols / block_elems · block_bytes (vx_quant_block).
 *     cols must be a multiple of the block size (the container reader guarantees this).
 *   - eng_qgemv: y[r] = Σ_c W[r,c]·x[c] for r < rows. eng_qgemm: Y[t, r] = Σ_c W[r,c]·X[t,c]
 *     for t < n (X is [n, cols], Y is [n, rows], both row-major, Y fully overwritten); W is
 *     streamed from memory once whatever n is.
 *   - Both parallelise over rows with eng_parallel (the engine's pool, eng_threads()
 *     parts), so they must not be called from inside an eng_parallel part; code already
 *     running in a part calls eng_qgemm_rows for its own row range instead.
 *   - Numerics. Up to 8 activation rows (decode), the ggml way: for Q8_0, Q4_0, MXFP4,
 *     Q4_K and Q6_K the activations are quantised on the fly to 8-bit blocks (32 values with
 *     an f32 scale; 256 for the K-quants) and the block products run in integers. The
 *     weights are exact; the only approximation is the activation rounding, bounded per
 *     output by
 *         |y - exact| <= Σ_i |W[r,i]| · amax_B(i)(x) / 254  +  1e-5 · Σ_i |W[r,i]·x[i]|
 *     where B(i) is the activation block of element i (docs/lql/QUANT.md). Q2_K, Q3_K and
 *     Q5_K dequantise one block at a time and use f32 products (bounded by the second term
 *     alone), as does eng_qdot for every format. Above 8 rows (prefill) the formats with
 *     an integer kernel keep the same integer products on a CPU with AVX-512 VNNI
 *     (eng_gemm_part's integer kernel: the whole bound); every other case, and
 *     eng_qgemm_rows, dequantises tiles of weight rows exactly and multiplies them in f32:
 *     the second term alone. LQL_QEXACT=1 (read per
 *     call) keeps every batch size in f32.
 *   - They never fail: if the activation copy or a weight tile cannot be allocated, the f32
 *     block path (no memory needed) runs instead.
 */
#ifndef LQL_QKERNELS_H
#define LQL_QKERNELS_H

#include "vindex.h"

/* 1 when dt is a block codec these kernels execute, 0 otherwise. */
int eng_qsupported(vx_dtype dt);

void eng_qgemv(vx_dtype dt, const void *W, int rows, int cols, const float *x, float *y);
void eng_qgemm(vx_dtype dt, const void *W, int rows, int cols, const float *X, int n,
               float *Y);
/* 1 when eng_qgemm past 8 activation rows takes the integer path on this host (Q8_0, Q4_0,
 * MXFP4, Q4_K or Q6_K with AVX-512 VNNI, LQL_QEXACT not 1): activations quantised as in
 * decode; 0: exact tiles. */
int eng_qprefill_int(vx_dtype dt);
/* How the integer prefill lays out dt's unpacked rows for eng_xpack_make_q8: ROW_I8_MIN
 * (block mins), ROW_I8_HALF (a scale per 16 values) or ROW_I8_PLAIN. */
int eng_row_i8_kind(vx_dtype dt);
/* Serial form of eng_qgemm over weight rows [r0, r1): writes Y[t, r] for those rows only. */
void eng_qgemm_rows(vx_dtype dt, const void *W, int r0, int r1, int rows, int cols,
                    const float *X, int n, float *Y);

/* eng_qgemm's streaming path (n <= 8) as one job of eng_parallel_rows (engine_int.h): rj
 * set to compute Y row for row as eng_qgemm would. 0 on success (then eng_qrows_free); -1
 * when n > 8 or memory runs out (the caller calls eng_qgemm). */
struct eng_rowjob;
int eng_qrows_make(vx_dtype dt, const void *W, int rows, int cols, const float *X, int n, float *Y,
                   struct eng_rowjob *rj);
void eng_qrows_free(struct eng_rowjob *rj);

/* One weight row (cols elements in dt) · x in f32 with exact weights (the browse path:
 * gate-row scores read in place). */
float eng_qdot(vx_dtype dt, const void *row, const float *x, int cols);
/* One weight row to f32, bit-equal to vx_dequantize_row but dequantised in registers
 * (AVX2) for Q8_0, Q4_0, MXFP4, Q4_K and Q6_K. Nothing is written for a non-block dtype. */
void eng_qrow_f32(vx_dtype dt, const void *row, float *dst, int cols);

#endif
