/* ---- gemm_common.cuh: what the generated GEMM templates share ---------------
 *
 * Emitted after the group's kf_epi (cg_gemm_epi.c) in the sources of both
 * GEMM templates (gemm_sm90.cuh: wgmma; gemm_sm80.cuh: mma.sync): their
 * accumulator fragments place columns alike (per 8 columns, 2 adjacent ones
 * of rows lane / 4 and lane / 4 + 8 in each lane of a quad), so one quad
 * transpose gives every lane 8 adjacent columns of a row for kf_epi<8>.
 */

/* Column groups j0 .. j0 + 3 of one accumulator row (x[2i + e]: group
 * j0 + i, columns 2 (lane % 4) + e) become, in lane t of the quad, the 8
 * columns of group j0 + t: a 4 x 4 transpose of pairs across the quad's
 * lanes in two exchanges (lane ^ 2 swaps the off-diagonal 2 x 2 blocks,
 * lane ^ 1 the off-diagonal pairs within them). Every index is a constant:
 * the choices are selects, the array stays in registers. */
__device__ __forceinline__ void kf_gm_quad_t(float (&x)[8], int t) {
    const bool hi = (t & 2) != 0, odd = (t & 1) != 0;
#pragma unroll
    for (int k = 0; k < 2; k++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const float snd = hi ? x[2 * k + e] : x[2 * (k + 2) + e];
            const float rcv = __shfl_xor_sync(0xffffffffu, snd, 2);
            if (hi)
                x[2 * k + e] = rcv;
            else
                x[2 * (k + 2) + e] = rcv;
        }
    }
#pragma unroll
    for (int m = 0; m < 2; m++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const float snd = odd ? x[4 * m + e] : x[4 * m + 2 + e];
            const float rcv = __shfl_xor_sync(0xffffffffu, snd, 1);
            if (odd)
                x[4 * m + e] = rcv;
            else
                x[4 * m + 2 + e] = rcv;
        }
    }
}
