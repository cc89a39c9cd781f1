/* zerotrain tests: test_gpu_ops' cases of attention: the chunked and fused kernels (every
 * tensor-core variant) against the CPU, which attention a context picks, the 16-bit homes,
 * its environment and alignment, runs of sequences, and cuDNN's graphs. */
#ifndef ZT_TESTS_GPU_GPU_OPS_ATTN_H
#define ZT_TESTS_GPU_GPU_OPS_ATTN_H

#include "tests/gpu/gpu_check.h"
#include "tests/gpu/gpu_ops_matmul.h"

/* ---- attention ---- */

static zt_kctx *GF; /* a second CUDA context, with ZT_CUDA_ATTN=fused */
/* fused, with the tensor-core attention's other kernels (ZT_CUDA_ATTN_FWD, _BWD, _DQ) */
static const struct {
    const char *fwd, *bwd, *dq, *label;
} ATTN_VARIANTS[] = {
    {"wmma", "wmma", "", "wmma forward and backward"},
    {"wmma", "wmma", "gemm", "wmma dK dV, dQ by GEMM"},
    {"", "", "gemm", "mma dK dV, dQ by GEMM"},
    {"", "", "atomic", "mma dK dV, dQ by atomics"},
    {"", "mma2", "", "mma dK dV at 2 blocks an SM"},
    {"mma4", "", "", "mma forward at 4 blocks an SM"},
};
#define N_ATTN_VARIANTS (sizeof(ATTN_VARIANTS) / sizeof(ATTN_VARIANTS[0]))
static zt_kctx *GV[N_ATTN_VARIANTS];
static zt_kctx *GT; /* a third, with ZT_CUDA_GEMM_TUNE=1 */

/* attention on the context GC, named `mode` in failures; results within rtol of the CPU's
 * (relative to |want| + rms) and, unless rms_tol is 0, their rms error within rms_tol: errs[0]
 * and errs[1] (NULL: not wanted) get those of the output and of dqkv's increment */
static void attention_case(int B, int T, int C, int NH, const char *mode, double rtol,
                           double rms_tol, double *errs)
{
    char what[160];
    size_t N = (size_t)B * T, n3 = N * 3 * C, nC = N * C, nL = (size_t)B * NH * T;
    size_t nS = zt_attention_scratch_floats(B, T, NH);
    float *qkv = kc_frandn(n3, 1.0);
    float *out = kc_falloc(nC), *lse = kc_falloc(nL), *scr = kc_falloc(nS);
    float *nan_fill = kc_falloc(nS);
    for (size_t i = 0; i < nS; i++)
        nan_fill[i] = NAN; /* scratch contents are undefined on entry: NaN must not leak */
    CPU->attention_forward(CC, out, lse, scr, qkv, NULL, B, T, C, NH);
    float *d_qkv = upf(qkv, n3), *d_out = dalloc(nC * 4), *d_lse = dalloc(nL * 4);
    float *d_scr = upf(nan_fill, nS);
    GPU->attention_forward(GC, d_out, d_lse, d_scr, d_qkv, NULL, B, T, C, NH);
    snprintf(what, sizeof(what), "attention_forward %s out B=%d T=%d C=%d NH=%d (chunks of %d)",
             mode, B, T, C, NH, zt_attention_chunk_seqs(B, T, NH));
    check_f(what, d_out, out, nC, rtol, 1e-6);
    double e_out = rms_tol > 0 ? check_rms(what, d_out, out, NULL, nC, rms_tol) : 0.0;
    snprintf(what, sizeof(what), "attention_forward %s lse B=%d T=%d C=%d NH=%d", mode, B, T, C,
             NH);
    /* with 16-bit inputs an lse of T = 1 is one rounded score, whose error (about 1e-3 in bf16)
     * can pass rtol of its own small size: seen in fp16 at 8e-4 against 4.3e-3 */
    check_f(what, d_lse, lse, nL, rtol, rms_tol > 0 ? 1e-2 : 1e-5);

    float *dout = kc_frandn(nC, 1.0), *dqkv = kc_frandn(n3, 1.0), *dqkv0 = kc_falloc(n3);
    memcpy(dqkv0, dqkv, n3 * sizeof(float));
    float *d_dout = upf(dout, nC), *d_dqkv = upf(dqkv, n3);
    /* the CPU's out and lse, so only the backward differs */
    float *d_out2 = upf(out, nC), *d_lse2 = upf(lse, nL);
    GPU->copy_h2d(GC, d_scr, nan_fill, nS * sizeof(float)); /* undefined on entry again */
    CPU->attention_backward(CC, dqkv, scr, dout, qkv, out, lse, NULL, B, T, C, NH);
    GPU->attention_backward(GC, d_dqkv, d_scr, d_dout, d_qkv, d_out2, d_lse2, NULL, B, T, C, NH);
    /* a NULL dqkv is a no-op */
    GPU->attention_backward(GC, NULL, d_scr, d_dout, d_qkv, d_out2, d_lse2, NULL, B, T, C, NH);
    snprintf(what, sizeof(what), "attention_backward %s dqkv B=%d T=%d C=%d NH=%d", mode, B, T,
             C, NH);
    check_f(what, d_dqkv, dqkv, n3, rtol, 1e-6);
    double e_dqkv = rms_tol > 0 ? check_rms(what, d_dqkv, dqkv, dqkv0, n3, rms_tol) : 0.0;
    if (errs) {
        errs[0] = e_out;
        errs[1] = e_dqkv;
    }
    dfree(d_qkv), dfree(d_out), dfree(d_lse), dfree(d_scr), dfree(d_dout), dfree(d_dqkv);
    dfree(d_out2), dfree(d_lse2);
    zt_free(qkv), zt_free(out), zt_free(lse), zt_free(scr), zt_free(dout), zt_free(dqkv);
    zt_free(nan_fill), zt_free(dqkv0);
    printf("attention %s B=%d T=%d C=%d NH=%d: ok\n", mode, B, T, C, NH);
}

/* Both CUDA attentions against the CPU: the chunked one, and the fused kernels where the head
 * size is theirs (elsewhere the fused context runs the chunked code), in fp32 and, for 16-bit
 * matmul inputs, on tensor cores: Q, K, V, dO, P and dS rounded to bf16 (2^-9 relative each)
 * leave an rms error of 2e-3 to 7e-3 of the rms (a wrong tile or rescale: ~1), single elements
 * up to ~3e-2 of |want| + rms; rounded to fp16 (2^-12), errors several times smaller: the
 * fp16 kernels must beat the bf16 ones by half on each shape (they would equal them if fp16
 * contexts ran the bf16 kernels). */
static void test_attention(int B, int T, int C, int NH)
{
    attention_case(B, T, C, NH, "chunked", RT_GEMM, 0, NULL);
    if (C != 64 * NH) return;
    zt_kctx *chunked = GC;
    GC = GF;
    attention_case(B, T, C, NH, "fused", RT_GEMM, 0, NULL);
    /* the emulated tensor cores multiply whole tiles in every lane: quick, only the shapes of
     * up to 64 K query-key pairs per head */
    bool quick = QUICK, skip_tc = quick && (long long)B * T * T > 65536;
    if (!skip_tc) {
        double eb[2], eh[2];
        GPU->set_matmul_dtype(GF, ZT_BF16);
        attention_case(B, T, C, NH, "fused bf16", 0.1, 2e-2, eb);
        GPU->set_matmul_dtype(GF, ZT_F16);
        attention_case(B, T, C, NH, "fused fp16", 0.05, 1e-2, eh);
        GPU->set_matmul_dtype(GF, ZT_F32);
        /* the other kernels: the forward and the backward on mma.sync (scores in registers,
         * tiles of 64), dQ from dS^T by cuBLASLt instead of the dQ kernel; the same arithmetic
         * but for the order of the sums, so the same bounds. On the emulation the products did
         * run (the fused attention runs none otherwise) where the op's scratch holds a
         * sequence's dS^T (T x T per head beside its copies: from T = 88; shorter sequences
         * take the dQ kernel) */
        for (size_t v = 0; v < N_ATTN_VARIANTS; v++) {
            GC = GV[v];
            /* quick: bf16 only (fp16 runs the same kernels in the other type) */
            for (int half = 0; half < (quick ? 1 : 2); half++) {
                double ev[2];
                char mode[96];
                snprintf(mode, sizeof(mode), "fused %s, %s", half ? "fp16" : "bf16",
                         ATTN_VARIANTS[v].label);
                GPU->set_matmul_dtype(GC, half ? ZT_F16 : ZT_BF16);
                unsigned long long g0 = EMU_GEMMS();
                attention_case(B, T, C, NH, mode, half ? 0.05 : 0.1, half ? 1e-2 : 2e-2, ev);
                if (EMU_COUNTS && !strcmp(ATTN_VARIANTS[v].dq, "gemm") && T >= 128 &&
                    EMU_GEMMS() == g0)
                    ZT_FAIL("attention B=%d T=%d NH=%d with ZT_CUDA_ATTN_DQ=gemm ran no GEMM", B, T,
                            NH);
            }
        }
        GC = GF;
        /* compared where errors are many: with under 16 queries a sequence has a handful of
         * dS values, whose single rounding errors make up most of dq's and dk's (seen at T = 1:
         * fp16 9.9e-4 against bf16 1.7e-3) */
        for (int k = 0; k < 2 && (long long)B * T >= 16; k++)
            if (!(eh[k] < 0.5 * eb[k]))
                ZT_FAIL("attention B=%d T=%d NH=%d: fp16 tensor cores' rms error of %s %.3g is "
                        "not below half of bf16's %.3g",
                        B, T, NH, k ? "dqkv" : "out", eh[k], eb[k]);
    }
    GC = chunked;
}

/* Which attention ZT_CUDA_ATTN picks, seen from the scratch: the chunked path writes its
 * NH T T scores there, the fused kernels nothing for fp32 inputs and their 16-bit copy of qkv
 * (3 B T C / 2 floats, other than NH T T here) for 16-bit ones. "fused" (in every matmul mode)
 * picks the fused kernels, "chunked" the chunked path; unset, empty or a value that names
 * neither (warned, ignored) the fused ones for 16-bit matmul inputs, chunked for fp32. */
static void test_attention_choice(void)
{
    int B = 1, T = 64, C = 64, NH = 1;
    size_t n3 = (size_t)B * T * 3 * C, nS = zt_attention_scratch_floats(B, T, NH);
    float *qkv = kc_frandn(n3, 1.0), *scr = kc_falloc(nS);
    static const struct {
        const char *env;
        zt_dtype mm;
        int fused;
    } cases[] = {{NULL, ZT_F32, 0},    {"chunked", ZT_F32, 0},  {"flash", ZT_F32, 0},
                 {"fused", ZT_F32, 1}, {"fused", ZT_BF16, 1},   {"", ZT_BF16, 1},
                 {NULL, ZT_F16, 1},    {"chunked", ZT_BF16, 0}, {"flash", ZT_BF16, 1}};
    zt_kctx *keep = GC;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        if (cases[k].env)
            setenv("ZT_CUDA_ATTN", cases[k].env, 1);
        else
            unsetenv("ZT_CUDA_ATTN");
        zt_err err;
        zt_status st = GPU->ctx_create(&GC, 0, &err);
        unsetenv("ZT_CUDA_ATTN");
        if (st != ZT_OK)
            ZT_FAIL("ctx_create with ZT_CUDA_ATTN=%s: %s", cases[k].env, zt_err_msg(&err));
        GPU->set_matmul_dtype(GC, cases[k].mm);
        for (size_t i = 0; i < nS; i++)
            scr[i] = NAN;
        float *d_qkv = upf(qkv, n3), *d_scr = upf(scr, nS);
        float *d_out = dalloc((size_t)B * T * C * 4), *d_lse = dalloc((size_t)B * NH * T * 4);
        GPU->attention_forward(GC, d_out, d_lse, d_scr, d_qkv, NULL, B, T, C, NH);
        GPU->copy_d2h(GC, scr, d_scr, nS * sizeof(float));
        gsync("attention choice");
        size_t untouched = 0;
        for (size_t i = 0; i < nS; i++)
            untouched += isnan(scr[i]) != 0;
        printf("ZT_CUDA_ATTN=%s, %s inputs: %zu of %zu scratch floats untouched\n",
               cases[k].env ? cases[k].env : "(unset)", zt_dtype_name(cases[k].mm), untouched, nS);
        size_t fused = cases[k].mm == ZT_F32 ? 0 : (size_t)B * T * 3 * C / 2;
        size_t want = cases[k].fused ? fused : (size_t)NH * T * T;
        ASSERT_TRUE(fused != (size_t)NH * T * T);
        ASSERT_TRUE(nS - untouched == want);
        dfree(d_qkv), dfree(d_scr), dfree(d_out), dfree(d_lse);
        GPU->ctx_destroy(GC);
    }
    GC = keep;
    zt_free(qkv), zt_free(scr);
}

/* attention_forward on c and the kernels it launched (on the emulation) */
static unsigned long long attn_fwd_launches(zt_kctx *c, float *out, float *lse, float *scr,
                                            float *qkv, const zt_attn_home *home, int B, int T,
                                            int C, int NH)
{
    unsigned long long l0 = EMU_LAUNCHES();
    GPU->attention_forward(c, out, lse, scr, qkv, home, B, T, C, NH);
    return EMU_LAUNCHES() - l0;
}

/* The shape of the attention cases below (the homes, the kernel variables, cuDNN): two
 * sequences of 128 (quick: 96, a tile of 64 and a tail; from 88 the dQ product runs), two heads
 * of 64 */
#define AE_B 2
#define AE_T (QUICK ? 96 : 128)
#define AE_C 128
#define AE_NH 2

/* The 16-bit homes of qkv and out (attention's home: qkv's alone, out's alone, both) on
 * context c with matmul inputs mm: forward leaves them rounded there (the bits of cast)
 * beside the lse (and, where out has no home, the out) of a forward without them; backward
 * from the homes, its qkv and out arguments NaN, gives the dqkv of a backward from qkv and out
 * rounded through them, bit for bit. Where the tensor-core kernels take the homes as their
 * own (direct: their 16-bit type is the homes' and the homes are 16-byte aligned), on the
 * emulation forward launches what it launches without them and backward one kernel fewer where
 * qkv has a home (no rounding of qkv); elsewhere one cast more for each home, each way. With
 * both homes, attention_backward16 (d16: the kernels write the 16-bit gradient themselves); and
 * the forward with qkv set in its home. skew: bytes the homes (and the 16-bit gradient) start
 * past 16-byte alignment. */
static void attention_home_case(zt_kctx *c, zt_dtype mm, zt_dtype dt16, bool direct, bool d16,
                                size_t skew, const char *label)
{
    int B = AE_B, T = AE_T, C = AE_C, NH = AE_NH;
    char what[200];
    size_t n3 = (size_t)B * T * 3 * C, nC = (size_t)B * T * C, nL = (size_t)B * NH * T;
    size_t nS = zt_attention_scratch_floats(B, T, NH);
    zt_kctx *keep = GC;
    GC = c;
    GPU->set_matmul_dtype(c, mm);
    float *qkv = kc_frandn(n3, 1.0), *dout = kc_frandn(nC, 1.0), *dq0 = kc_frandn(n3, 1.0);
    float *nan3 = kc_falloc(n3), *out = kc_falloc(nC), *lse = kc_falloc(nL), *dq = kc_falloc(n3);
    uint16_t *wq = zt_malloc(n3 * 2), *wo = zt_malloc(nC * 2);
    ASSERT_TRUE(wq && wo);
    for (size_t i = 0; i < n3; i++)
        nan3[i] = NAN;
    float *d_qkv = upf(qkv, n3), *d_dout = upf(dout, nC), *d_scr = dalloc(nS * 4);
    float *d_out = dalloc(nC * 4), *d_lse = dalloc(nL * 4), *d_out2 = dalloc(nC * 4);
    float *d_lse2 = dalloc(nL * 4), *d_qr = dalloc(n3 * 4), *d_or = dalloc(nC * 4);
    float *d_dqa = dalloc(n3 * 4), *d_dqb = dalloc(n3 * 4), *d_nanq = dalloc(n3 * 4);
    float *d_nano = dalloc(nC * 4);
    char *hq0 = dalloc(n3 * 2 + 16), *ho0 = dalloc(nC * 2 + 16), *g0 = dalloc(n3 * 2 + 16);
    void *d_hq = hq0 + skew, *d_ho = ho0 + skew, *d_w = dalloc(n3 * 2), *d_g16 = g0 + skew;
    for (int which = 1; which <= 3; which++) { /* 1 qkv's home, 2 out's, 3 both */
        zt_attn_home home = {which & 1 ? d_hq : NULL, which & 2 ? d_ho : NULL, dt16, false};
        int nh = (which & 1) + (which >> 1);
        char tag[96];
        snprintf(tag, sizeof(tag), "%s, %s %s home(s)", label,
                 which == 1   ? "qkv's"
                 : which == 2 ? "out's"
                              : "both",
                 zt_dtype_name(dt16));
        unsigned long long lw = attn_fwd_launches(c, d_out, d_lse, d_scr, d_qkv, NULL, B, T, C, NH);
        GPU->copy_h2d(c, d_out2, nan3, nC * 4);
        unsigned long long lh =
            attn_fwd_launches(c, d_out2, d_lse2, d_scr, d_qkv, &home, B, T, C, NH);
        unsigned long long l0;
        GPU->cast(c, d_w, dt16, d_qkv, ZT_F32, n3);
        GPU->copy_d2h(c, wq, d_w, n3 * 2);
        GPU->cast(c, d_w, dt16, d_out, ZT_F32, nC);
        GPU->copy_d2h(c, wo, d_w, nC * 2);
        GPU->copy_d2h(c, out, d_out, nC * 4);
        GPU->copy_d2h(c, lse, d_lse, nL * 4);
        gsync("attention with homes");
        snprintf(what, sizeof(what), "attention_forward %s: lse", tag);
        check_bits(what, d_lse2, lse, nL, 4);
        snprintf(what, sizeof(what), "attention_forward %s: out", tag);
        if (!home.out) check_bits(what, d_out2, out, nC, 4);
        snprintf(what, sizeof(what), "attention_forward %s: qkv's home", tag);
        if (home.qkv) check_bits(what, d_hq, wq, n3, 2);
        snprintf(what, sizeof(what), "attention_forward %s: out's home", tag);
        if (home.out) check_bits(what, d_ho, wo, nC, 2);
        if (EMU_COUNTS && lh != lw + (direct ? 0 : (unsigned)nh))
            ZT_FAIL("attention_forward %s: %llu launches, %llu without the homes", tag, lh, lw);

        /* what restores would give */
        if (home.qkv)
            GPU->cast(c, d_qr, ZT_F32, d_hq, dt16, n3);
        else
            GPU->copy_d2d(c, d_qr, d_qkv, n3 * 4);
        if (home.out)
            GPU->cast(c, d_or, ZT_F32, d_ho, dt16, nC);
        else
            GPU->copy_d2d(c, d_or, d_out, nC * 4);
        GPU->copy_h2d(c, d_dqa, dq0, n3 * 4);
        GPU->copy_h2d(c, d_dqb, dq0, n3 * 4);
        GPU->copy_h2d(c, d_nanq, nan3, n3 * 4);
        GPU->copy_h2d(c, d_nano, nan3, nC * 4);
        l0 = EMU_LAUNCHES();
        GPU->attention_backward(c, d_dqa, d_scr, d_dout, d_qr, d_or, d_lse, NULL, B, T, C, NH);
        lw = EMU_LAUNCHES() - l0;
        l0 = EMU_LAUNCHES();
        GPU->attention_backward(c, d_dqb, d_scr, d_dout, home.qkv ? d_nanq : d_qkv,
                                home.out ? d_nano : d_out, d_lse, &home, B, T, C, NH);
        lh = EMU_LAUNCHES() - l0;
        GPU->copy_d2h(c, dq, d_dqa, n3 * 4);
        gsync("attention backward from homes");
        snprintf(what, sizeof(what), "attention_backward %s: dqkv", tag);
        check_bits(what, d_dqb, dq, n3, 4);
        if (EMU_COUNTS && lh + (direct && home.qkv ? 1 : 0) != lw + (direct ? 0 : (unsigned)nh))
            ZT_FAIL("attention_backward %s: %llu launches, %llu without the homes", tag, lh, lw);
        if (which == 3) {
            /* attention_backward16: the bits of the gradient from zeros rounded, its fp32 room
             * NaN (left so where the kernels write the 16-bit gradient themselves: d16, with
             * the launches of attention_backward; else a cast more) */
            GPU->memset0(c, d_dqa, n3 * 4);
            GPU->attention_backward(c, d_dqa, d_scr, d_dout, d_nanq, d_nano, d_lse, &home, B, T, C,
                                    NH);
            GPU->cast(c, d_w, dt16, d_dqa, ZT_F32, n3);
            GPU->copy_d2h(c, wq, d_w, n3 * 2);
            GPU->copy_h2d(c, d_dqb, nan3, n3 * 4);
            l0 = EMU_LAUNCHES();
            GPU->attention_backward16(c, d_g16, dt16, d_dqb, d_scr, d_dout, NULL, d_nanq, d_nano,
                                      d_lse, &home, B, T, C, NH);
            unsigned long long l16 = EMU_LAUNCHES() - l0;
            gsync("attention_backward16");
            snprintf(what, sizeof(what), "attention_backward16 %s: the rounded gradient", tag);
            check_bits(what, d_g16, wq, n3, 2);
            if (d16) check_bits(what, d_dqb, nan3, n3, 4);
            if (EMU_COUNTS && l16 != lh + (d16 ? 0 : 1))
                ZT_FAIL("%s: %llu launches, %llu for attention_backward", what, l16, lh);
            /* dO given rounded (dout16, skewed as the homes; dout NaN room): the bits of dout as
             * its widened values (delta from them too), read in place where aligned */
            char *o0 = dalloc(nC * 2 + 16);
            void *d_do16 = o0 + skew;
            float *d_dow = dalloc(nC * 4);
            GPU->cast(c, d_do16, dt16, d_dout, ZT_F32, nC);
            GPU->cast(c, d_dow, ZT_F32, d_do16, dt16, nC);
            GPU->attention_backward16(c, d_g16, dt16, d_dqb, d_scr, d_dow, NULL, d_nanq, d_nano,
                                      d_lse, &home, B, T, C, NH);
            GPU->copy_d2h(c, wq, d_g16, n3 * 2);
            GPU->copy_h2d(c, d_dow, nan3, nC * 4), GPU->copy_h2d(c, d_g16, nan3, n3 * 2);
            GPU->attention_backward16(c, d_g16, dt16, d_dqb, d_scr, d_dow, d_do16, d_nanq, d_nano,
                                      d_lse, &home, B, T, C, NH);
            gsync("attention_backward16 of a 16-bit dO");
            snprintf(what, sizeof(what), "attention_backward16 %s, dO in 16 bits", tag);
            check_bits(what, d_g16, wq, n3, 2);
            dfree(o0), dfree(d_dow);
        }
        printf("attention %s: ok\n", tag);
    }
    /* qkv_set: qkv's home holds qkv rounded already (as qkv's GEMM leaves it) and the fp32 qkv
     * is NaN room: the lse of a forward from the widened values, out's home their output rounded,
     * qkv's home left as it was; direct, one launch fewer (no rounding of qkv), else a widening
     * and out's cast more */
    zt_attn_home home = {d_hq, d_ho, dt16, true};
    snprintf(what, sizeof(what), "%s, qkv set in its %s home", label, zt_dtype_name(dt16));
    GPU->cast(c, d_hq, dt16, d_qkv, ZT_F32, n3);
    GPU->cast(c, d_qr, ZT_F32, d_hq, dt16, n3);
    unsigned long long lw = attn_fwd_launches(c, d_out, d_lse, d_scr, d_qr, NULL, B, T, C, NH);
    GPU->copy_h2d(c, d_nanq, nan3, n3 * 4);
    unsigned long long lh = attn_fwd_launches(c, d_out2, d_lse2, d_scr, d_nanq, &home, B, T, C, NH);
    GPU->copy_d2h(c, wq, d_hq, n3 * 2); /* checked against the rounding below */
    GPU->cast(c, d_w, dt16, d_qr, ZT_F32, n3);
    GPU->cast(c, d_hq, dt16, d_out, ZT_F32, nC);
    GPU->copy_d2h(c, wo, d_hq, nC * 2);
    GPU->copy_d2h(c, lse, d_lse, nL * 4);
    gsync("attention with qkv set in its home");
    check_bits(what, d_lse2, lse, nL, 4);
    check_bits(what, d_ho, wo, nC, 2);
    check_bits(what, d_w, wq, n3, 2);
    if (EMU_COUNTS && lh != (direct ? lw - 1 : lw + 2))
        ZT_FAIL("attention_forward %s: %llu launches, %llu from fp32 without homes", what, lh, lw);
    printf("attention %s: ok\n", what);
    dfree(d_qkv), dfree(d_dout), dfree(d_scr), dfree(d_out), dfree(d_lse), dfree(d_out2);
    dfree(d_lse2), dfree(d_qr), dfree(d_or), dfree(d_dqa), dfree(d_dqb), dfree(d_nanq);
    dfree(d_nano), dfree(hq0), dfree(ho0), dfree(d_w), dfree(g0);
    zt_free(qkv), zt_free(dout), zt_free(dq0), zt_free(nan3), zt_free(out), zt_free(lse);
    zt_free(dq), zt_free(wq), zt_free(wo);
    GPU->set_matmul_dtype(c, ZT_F32);
    GC = keep;
}

/* Every path with a home: the tensor-core kernels in their own type (each variant but dQ by
 * atomics, whose sums come in any order on a GPU), with homes off 16-byte alignment (cast, not
 * taken) and in the other type, the fp32 fused kernels, the chunked attention. */
static void test_attention_home(void)
{
    attention_home_case(GF, ZT_BF16, ZT_BF16, true, true, 0, "fused bf16");
    attention_home_case(GF, ZT_F16, ZT_F16, true, true, 0, "fused fp16");
    attention_home_case(GF, ZT_BF16, ZT_BF16, false, false, 2, "fused bf16, homes 2 bytes off");
    attention_home_case(GF, ZT_BF16, ZT_F16, false, false, 0, "fused bf16");
    attention_home_case(GF, ZT_F32, ZT_BF16, false, false, 0, "fused fp32");
    attention_home_case(GC, ZT_BF16, ZT_BF16, false, false, 0, "chunked bf16");
    for (size_t v = 0; v < N_ATTN_VARIANTS; v++)
        if (strcmp(ATTN_VARIANTS[v].dq, "atomic") != 0)
            attention_home_case(GV[v], ZT_BF16, ZT_BF16, true, !*ATTN_VARIANTS[v].dq, 0,
                                ATTN_VARIANTS[v].label);
}

/* A 16-bit GPU buffer d against host want16 (type dt): bit for bit where exact, else within a
 * unit in the last place of the type (a GEMM with a 16-bit output may sum in another order) */

static unsigned long long attention_env_run(const char *name, const char *value, const float *qkv,
                                            const float *dout, float *res, char *log, size_t n)
{
    int B = AE_B, T = AE_T, C = AE_C, NH = AE_NH;
    size_t n3 = (size_t)B * T * 3 * C, nC = (size_t)B * T * C, nL = (size_t)B * NH * T;
    size_t nS = zt_attention_scratch_floats(B, T, NH);
    FILE *f = tmpfile();
    ASSERT_TRUE(f != NULL);
    zt_log_set_file(f);
    setenv("ZT_CUDA_ATTN", "fused", 1);
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
    zt_kctx *c = NULL;
    zt_err err;
    zt_status st = GPU->ctx_create(&c, 0, &err);
    unsetenv(name);
    unsetenv("ZT_CUDA_ATTN");
    zt_log_set_file(stderr);
    if (st != ZT_OK)
        ZT_FAIL("ctx_create with %s=%s: %s", name, value ? value : "(unset)", zt_err_msg(&err));
    rewind(f);
    size_t got = fread(log, 1, n - 1, f);
    log[got] = '\0';
    fclose(f);
    GPU->set_matmul_dtype(c, ZT_BF16);
    zt_kctx *keep = GC;
    GC = c;
    unsigned long long g0 = EMU_GEMMS();
    float *d_qkv = upf(qkv, n3), *d_dout = upf(dout, nC), *d_out = dalloc(nC * 4);
    float *d_lse = dalloc(nL * 4), *d_scr = dalloc(nS * 4), *d_dq = dalloc(n3 * 4);
    GPU->attention_forward(c, d_out, d_lse, d_scr, d_qkv, NULL, B, T, C, NH);
    GPU->memset0(c, d_dq, n3 * 4);
    GPU->attention_backward(c, d_dq, d_scr, d_dout, d_qkv, d_out, d_lse, NULL, B, T, C, NH);
    GPU->copy_d2h(c, res, d_out, nC * 4);
    GPU->copy_d2h(c, res + nC, d_lse, nL * 4);
    GPU->copy_d2h(c, res + nC + nL, d_dq, n3 * 4);
    gsync("attention under a variable");
    dfree(d_qkv), dfree(d_dout), dfree(d_out), dfree(d_lse), dfree(d_scr), dfree(d_dq);
    GC = keep;
    GPU->ctx_destroy(c);
    return EMU_GEMMS() - g0;
}

/* ZT_CUDA_ATTN_FWD, _BWD and _DQ: a value that names no kernel warns, naming the variable, the
 * value and what it takes, and counts as unset (the bits of unset, and on the emulation none
 * of the other kernels launched); each value that names a kernel is taken without a word:
 * "mma" and "kernel" (the defaults) give the bits of unset, "wmma", "gemm" and "atomic" launch
 * their kernels (seen on the emulation) and the wmma forward gives other bits (its tiles of 32
 * keys rescale the outputs at other keys). On the emulation, whose products sum in order of k, the
 * wmma backward gives the bits of the mma backward: the same P and dS, summed in the same
 * order. */
static void test_attention_env(void)
{
    static const struct {
        const char *name, *dflt, *other, *expect;
        const char *launch; /* a name part of the kernels "other" launches (NULL: GEMMs) */
        int bits; /* "other" gives: 1 other bits than unset, 0 on the emulation the same, -1
                     either */
    } vars[] = {
        {"ZT_CUDA_ATTN_FWD", "mma", "wmma", "expected 'mma', 'mma4' or 'wmma'", "tensor cores", 1},
        {"ZT_CUDA_ATTN_FWD", "mma", "mma4", "expected 'mma', 'mma4' or 'wmma'", "4 blocks an SM",
         0},
        {"ZT_CUDA_ATTN_BWD", "mma", "wmma", "expected 'mma', 'mma2' or 'wmma'", "tensor cores", 0},
        {"ZT_CUDA_ATTN_BWD", "mma", "mma2", "expected 'mma', 'mma2' or 'wmma'", "2 blocks an SM",
         0},
        {"ZT_CUDA_ATTN_DQ", "kernel", "gemm", "expected 'kernel', 'gemm' or 'atomic'", NULL, -1},
        {"ZT_CUDA_ATTN_DQ", "kernel", "atomic", "expected 'kernel', 'gemm' or 'atomic'", "dK dV dQ",
         -1},
    };
    size_t nC = (size_t)AE_B * AE_T * AE_C;
    size_t n = nC * 4 + (size_t)AE_B * AE_NH * AE_T; /* out, lse, dqkv */
    float *qkv = kc_frandn(3 * nC, 1.0), *dout = kc_frandn(nC, 1.0);
    float *unset = kc_falloc(n), *res = kc_falloc(n);
    char log[4096], want[96];
    if (attention_env_run(vars[0].name, NULL, qkv, dout, unset, log, sizeof(log)) != 0)
        ZT_FAIL("the fused attention ran GEMMs with every variable unset");
    ASSERT_TRUE(strstr(log, "ignoring") == NULL);
    for (size_t v = 0; v < sizeof(vars) / sizeof(vars[0]); v++) {
        const char *nm = vars[v].name;
        const char *part = vars[v].launch ? vars[v].launch : "tensor cores";
        unsigned long long l0 = EMU_NAMED(part);
        unsigned long long g = attention_env_run(nm, "bogus", qkv, dout, res, log, sizeof(log));
        snprintf(want, sizeof(want), "ignoring %s=bogus", nm);
        ASSERT_CONTAINS(log, want);
        ASSERT_CONTAINS(log, vars[v].expect);
        if (g != 0 || EMU_NAMED(part) != l0 || memcmp(res, unset, n * sizeof(float)) != 0)
            ZT_FAIL("%s=bogus: not as unset (%llu GEMMs, other kernels or other bits)", nm, g);
        g = attention_env_run(nm, vars[v].dflt, qkv, dout, res, log, sizeof(log));
        ASSERT_TRUE(strstr(log, "ignoring") == NULL);
        if (g != 0 || EMU_NAMED(part) != l0 || memcmp(res, unset, n * sizeof(float)) != 0)
            ZT_FAIL("%s=%s: not as unset (%llu GEMMs, other kernels or other bits)", nm,
                    vars[v].dflt, g);
        g = attention_env_run(nm, vars[v].other, qkv, dout, res, log, sizeof(log));
        ASSERT_TRUE(strstr(log, "ignoring") == NULL);
        bool same = memcmp(res, unset, n * sizeof(float)) == 0;
        if (vars[v].bits == 1 && same)
            ZT_FAIL("%s=%s: the bits of unset (not taken)", nm, vars[v].other);
        if (EMU_COUNTS) {
            if (vars[v].launch ? EMU_NAMED(part) == l0 : g == 0)
                ZT_FAIL("%s=%s: its kernels did not run", nm, vars[v].other);
            if (vars[v].bits == 0 && !same)
                ZT_FAIL("%s=%s: other bits than unset on the emulation", nm, vars[v].other);
        }
        printf("%s: bogus warned and ignored, %s as unset, %s taken\n", nm, vars[v].dflt,
               vars[v].other);
    }
    zt_free(qkv), zt_free(dout), zt_free(unset), zt_free(res);
}

/* The tensor-core attention rounds its operands into 16-bit copies four floats at a time from
 * 16-byte aligned rows, one at a time otherwise: tensors 4 bytes off that alignment give the
 * same bits. */
static void test_attention_misaligned(void)
{
    int B = 2, T = 70, C = 128, NH = 2;
    size_t n3 = (size_t)B * T * 3 * C, nC = (size_t)B * T * C, nL = (size_t)B * NH * T;
    size_t nS = zt_attention_scratch_floats(B, T, NH);
    zt_kctx *keep = GC;
    GC = ctx_with_mm("bf16");
    float *qkv = kc_frandn(n3, 1.0), *dout = kc_frandn(nC, 1.0);
    float *out[2], *dq[2];
    for (int off = 0; off < 2; off++) {
        float *d_qkv = upf_off(qkv, n3, off), *d_dout = upf_off(dout, nC, off);
        float *d_out = (float *)dalloc((nC + 1) * 4) + off, *d_lse = dalloc(nL * 4);
        float *d_scr = dalloc(nS * 4), *d_dq = (float *)dalloc((n3 + 1) * 4) + off;
        GPU->attention_forward(GC, d_out, d_lse, d_scr, d_qkv, NULL, B, T, C, NH);
        GPU->memset0(GC, d_dq, n3 * 4);
        GPU->attention_backward(GC, d_dq, d_scr, d_dout, d_qkv, d_out, d_lse, NULL, B, T, C, NH);
        out[off] = kc_falloc(nC), dq[off] = kc_falloc(n3);
        GPU->copy_d2h(GC, out[off], d_out, nC * 4);
        GPU->copy_d2h(GC, dq[off], d_dq, n3 * 4);
        gsync("attention, misaligned tensors");
        dfree(d_qkv - off), dfree(d_dout - off), dfree(d_out - off), dfree(d_lse), dfree(d_scr);
        dfree(d_dq - off);
    }
    if (memcmp(out[0], out[1], nC * 4) != 0 || memcmp(dq[0], dq[1], n3 * 4) != 0)
        ZT_FAIL(
            "tensor-core attention: 4-byte aligned tensors give other bits than 16-byte aligned ones");
    GPU->ctx_destroy(GC);
    GC = keep;
    zt_free(qkv), zt_free(dout), zt_free(out[0]), zt_free(out[1]), zt_free(dq[0]), zt_free(dq[1]);
    printf("attention on 4-byte aligned tensors: the bits of aligned ones, ok\n");
}

#if defined(ZT_TEST_EMU) || defined(ZT_TEST_CUDA) /* a build with kernels/cuda/ */
/* kernels/cuda/attn_tc_cuda.cu with a given scratch (cuda_int.h) */
void zt_cuda_attn_tc_forward(zt_kctx *ctx, float *out, float *lse, float *scratch,
                             size_t scratch_floats, const float *qkv, uint16_t *home,
                             uint16_t *out16, int B, int T, int C, int NH);
void zt_cuda_attn_tc_backward(zt_kctx *ctx, float *dqkv, uint16_t *dq16, float *scratch,
                              size_t scratch_floats, const float *dout, const uint16_t *dout16,
                              const float *qkv, const uint16_t *home, const float *out,
                              const uint16_t *out16, const float *lse, int B, int T, int C, int NH);
size_t zt_cuda_attn_tc_floats(int nseq, int T, int C, int NH);

/* ctx_with_mm with ZT_CUDA_ATTN=fused: zerotrain's attention kernels even on the 16-bit homes
 * (where cuDNN's would run by default) */
static zt_kctx *ctx_kernels_mm(const char *mode)
{
    setenv("ZT_CUDA_ATTN", "fused", 1);
    zt_kctx *c = ctx_with_mm(mode);
    unsetenv("ZT_CUDA_ATTN");
    return c;
}

/* kernels/cuda/attn_cudnn.c (cuda_int.h) */
bool zt_cuda_dnn_built(void);
unsigned long long zt_cuda_dnn_runs(const zt_kctx *ctx);

/* One shape on the ZT_CUDA_ATTN=cudnn context c in dt: the forward with both homes and the
 * backward writing the 16-bit gradient from a 16-bit dO (the engine's bf16 and fp16 path)
 * against the CPU's fp32 op, within the tensor-core kernels' bounds (attention_case); cuDNN
 * must have run both (two executions or more: runs of sequences where the scratch is short).
 * same_bits (dQ by its product, the default): a second backward gives the same bits. false,
 * nothing checked, where cuDNN did not run and the log says it cannot be loaded. */
static bool attention_cudnn_case(zt_kctx *c, zt_dtype dt, int B, int T, int C, int NH,
                                 bool same_bits)
{
    char what[160];
    size_t n3 = (size_t)B * T * 3 * C, nC = (size_t)B * T * C, nL = (size_t)B * NH * T;
    size_t nS = zt_attention_scratch_floats(B, T, NH);
    /* element by element within rtol of (|want| + the rms): at T 1024 bf16's rounding of the
     * inputs, P and dS alone puts dK's worst element at 0.088 of that (fp16: 0.012;
     * tests/gpu/attn_bf16_error.py, at B 2 NH 12 with the same draws' scale), and cuDNN's
     * came to 0.128 on an H200; the rms check is the tight one */
    double rtol = dt == ZT_BF16 ? (T >= 512 ? 0.25 : 0.1) : (T >= 512 ? 0.1 : 0.05);
    double rms = dt == ZT_BF16 ? 2e-2 : 1e-2;
    zt_kctx *keep = GC;
    GC = c;
    GPU->set_matmul_dtype(c, dt);
    float *qkv = kc_frandn(n3, 1.0), *dout = kc_frandn(nC, 1.0), *nan3 = kc_falloc(n3);
    float *out = kc_falloc(nC), *lse = kc_falloc(nL), *dq = kc_falloc(n3), *scr = kc_falloc(nS);
    for (size_t i = 0; i < n3; i++)
        nan3[i] = NAN, dq[i] = 0.0f; /* the CPU's backward adds into dq */
    float *nanS = kc_falloc(nS);
    for (size_t i = 0; i < nS; i++)
        nanS[i] = NAN;
    CPU->attention_forward(CC, out, lse, scr, qkv, NULL, B, T, C, NH);
    CPU->attention_backward(CC, dq, scr, dout, qkv, out, lse, NULL, B, T, C, NH);
    float *d_qkv = upf(qkv, n3), *d_dout = upf(dout, nC), *d_scr = upf(nanS, nS);
    float *d_room = upf(nan3, n3), *d_nanq = upf(nan3, n3), *d_nano = upf(nan3, nC);
    float *d_lse = dalloc(nL * 4), *d_w = dalloc(n3 * 4);
    void *d_hq = dalloc(n3 * 2), *d_ho = dalloc(nC * 2), *d_g16 = dalloc(n3 * 2);
    void *d_do16 = dalloc(nC * 2);
    GPU->cast(c, d_do16, dt, d_dout, ZT_F32, nC);
    zt_attn_home home = {d_hq, d_ho, dt, false};
    unsigned long long r0 = zt_cuda_dnn_runs(c);
    GPU->attention_forward(c, d_nano, d_lse, d_scr, d_qkv, &home, B, T, C, NH);
    GPU->attention_backward16(c, d_g16, dt, d_room, d_scr, d_nano, d_do16, d_nanq, d_nano, d_lse,
                              &home, B, T, C, NH);
    gsync("attention by cuDNN");
    unsigned long long runs = zt_cuda_dnn_runs(c) - r0;
    bool ran = runs >= 2;
    if (ran) {
        snprintf(what, sizeof(what), "attention_forward cuDNN %s out B=%d T=%d C=%d NH=%d",
                 zt_dtype_name(dt), B, T, C, NH);
        GPU->cast(c, d_w, ZT_F32, d_ho, dt, nC);
        check_f(what, d_w, out, nC, rtol, 1e-6);
        check_rms(what, d_w, out, NULL, nC, rms);
        snprintf(what, sizeof(what), "attention_forward cuDNN %s lse B=%d T=%d C=%d NH=%d",
                 zt_dtype_name(dt), B, T, C, NH);
        check_f(what, d_lse, lse, nL, rtol, 1e-2);
        snprintf(what, sizeof(what), "attention_backward16 cuDNN %s dqkv B=%d T=%d C=%d NH=%d",
                 zt_dtype_name(dt), B, T, C, NH);
        GPU->cast(c, d_w, ZT_F32, d_g16, dt, n3);
        check_f(what, d_w, dq, n3, rtol, 1e-6);
        check_rms(what, d_w, dq, NULL, n3, rms);
        if (same_bits) { /* the backward again, its gradient's bits against the first's */
            uint16_t *g1 = zt_malloc(n3 * 2), *g2 = zt_malloc(n3 * 2);
            ASSERT_TRUE(g1 && g2);
            GPU->copy_d2h(c, g1, d_g16, n3 * 2);
            GPU->attention_backward16(c, d_g16, dt, d_room, d_scr, d_nano, d_do16, d_nanq, d_nano,
                                      d_lse, &home, B, T, C, NH);
            GPU->copy_d2h(c, g2, d_g16, n3 * 2);
            gsync("attention by cuDNN, the backward again");
            if (memcmp(g1, g2, n3 * 2) != 0)
                ZT_FAIL("attention_backward16 cuDNN %s B=%d T=%d C=%d NH=%d: a second run gave "
                        "other bits (dQ by its product should be deterministic)",
                        zt_dtype_name(dt), B, T, C, NH);
            zt_free(g1), zt_free(g2);
        }
        printf("attention by cuDNN %s B=%d T=%d C=%d NH=%d, dQ %s (%llu executions): ok\n",
               zt_dtype_name(dt), B, T, C, NH,
               same_bits ? "by its product, the same bits twice" : "summed in fp32", runs);
    }
    dfree(d_qkv), dfree(d_dout), dfree(d_scr), dfree(d_room), dfree(d_nanq), dfree(d_nano);
    dfree(d_lse), dfree(d_w), dfree(d_hq), dfree(d_ho), dfree(d_g16), dfree(d_do16);
    zt_free(qkv), zt_free(dout), zt_free(nan3), zt_free(out), zt_free(lse), zt_free(dq);
    zt_free(scr), zt_free(nanS);
    GPU->set_matmul_dtype(c, ZT_F32);
    GC = keep;
    return ran;
}

/* ZT_CUDA_ATTN=cudnn (kernels/cuda/attn_cudnn.c). Without the homes the kernels run: the bits
 * of unset. A build without cuDNN's headers (the emulation's) warns that it ignores the value.
 * With them, on a GPU: cuDNN's forward and backward against the CPU in bf16 and fp16, at a
 * short shape, a length no tile divides, and GPT-2's heads, the backward's bits the same twice;
 * with ZT_CUDA_ATTN_DQ=atomic (dQ summed in fp32 by cuDNN's atomics) in bf16 at two of them;
 * and cuDNN running by default (unset) but not with ZT_CUDA_ATTN=fused. A GPU machine whose
 * cuDNN cannot be loaded says so and skips those (the log's reason printed). */
static void test_attention_cudnn(void)
{
    size_t nC = (size_t)AE_B * AE_T * AE_C;
    size_t n = nC * 4 + (size_t)AE_B * AE_NH * AE_T;
    float *qkv = kc_frandn(3 * nC, 1.0), *dout = kc_frandn(nC, 1.0);
    float *unset = kc_falloc(n), *res = kc_falloc(n);
    char log[4096];
    attention_env_run("ZT_CUDA_ATTN", NULL, qkv, dout, unset, log, sizeof(log));
    attention_env_run("ZT_CUDA_ATTN", "cudnn", qkv, dout, res, log, sizeof(log));
    if (memcmp(res, unset, n * sizeof(float)) != 0)
        ZT_FAIL("ZT_CUDA_ATTN=cudnn without homes: not the bits of the kernels");
    zt_free(qkv), zt_free(dout), zt_free(unset), zt_free(res);
    if (!zt_cuda_dnn_built()) {
        ASSERT_CONTAINS(log, "ignoring ZT_CUDA_ATTN=cudnn");
        ASSERT_CONTAINS(log, "no cuDNN");
        printf("ZT_CUDA_ATTN=cudnn without cuDNN's headers: warned and ignored, ok\n");
        return;
    }
    ASSERT_TRUE(strstr(log, "ignoring") == NULL);
    FILE *f = tmpfile();
    ASSERT_TRUE(f != NULL);
    zt_log_set_file(f);
    setenv("ZT_CUDA_ATTN", "cudnn", 1);
    zt_kctx *c = NULL;
    zt_err err;
    zt_status st = GPU->ctx_create(&c, 0, &err);
    unsetenv("ZT_CUDA_ATTN");
    bool ran = st == ZT_OK && attention_cudnn_case(c, ZT_BF16, 2, 128, 128, 2, true);
    zt_log_set_file(stderr);
    rewind(f);
    size_t got = fread(log, 1, sizeof(log) - 1, f);
    log[got] = '\0';
    fclose(f);
    if (st != ZT_OK) ZT_FAIL("ctx_create with ZT_CUDA_ATTN=cudnn: %s", zt_err_msg(&err));
    if (!ran) {
        if (!strstr(log, "cannot load")) {
            GPU->ctx_destroy(c);
            ZT_FAIL("ZT_CUDA_ATTN=cudnn: cuDNN did not run the attention: %s", log);
        }
        printf("SKIP attention by cuDNN: this machine's cuDNN cannot be loaded: %s", log);
        GPU->ctx_destroy(c);
        return;
    }
    ASSERT_TRUE(attention_cudnn_case(c, ZT_F16, 2, 128, 128, 2, true));
    ASSERT_TRUE(attention_cudnn_case(c, ZT_BF16, 3, 37, 128, 2, true));
    ASSERT_TRUE(attention_cudnn_case(c, ZT_BF16, 2, 1024, 768, 12, true));
    ASSERT_TRUE(attention_cudnn_case(c, ZT_F16, 2, 1024, 768, 12, true));
    /* GPT-2's 25 MB a sequence of the scores' gradients: 8 sequences go in runs (the scratch
     * holds 3) */
    ASSERT_TRUE(attention_cudnn_case(c, ZT_BF16, 8, 1024, 768, 12, true));
    GPU->ctx_destroy(c);
    setenv("ZT_CUDA_ATTN", "cudnn", 1);
    setenv("ZT_CUDA_ATTN_DQ", "atomic", 1);
    st = GPU->ctx_create(&c, 0, &err);
    unsetenv("ZT_CUDA_ATTN");
    unsetenv("ZT_CUDA_ATTN_DQ");
    if (st != ZT_OK)
        ZT_FAIL("ctx_create with ZT_CUDA_ATTN=cudnn ZT_CUDA_ATTN_DQ=atomic: %s", zt_err_msg(&err));
    ASSERT_TRUE(attention_cudnn_case(c, ZT_BF16, 3, 37, 128, 2, false));
    ASSERT_TRUE(attention_cudnn_case(c, ZT_BF16, 2, 1024, 768, 12, false));
    GPU->ctx_destroy(c);
    /* the default (unset) runs cuDNN where it can; ZT_CUDA_ATTN=fused never does */
    static const char *const envs[] = {NULL, "fused"};
    for (int e = 0; e < 2; e++) {
        if (envs[e])
            setenv("ZT_CUDA_ATTN", envs[e], 1);
        else
            unsetenv("ZT_CUDA_ATTN");
        st = GPU->ctx_create(&c, 0, &err);
        unsetenv("ZT_CUDA_ATTN");
        if (st != ZT_OK) ZT_FAIL("ctx_create with ZT_CUDA_ATTN=%s: %s", envs[e], zt_err_msg(&err));
        bool by_dnn = attention_cudnn_case(c, ZT_BF16, 2, 128, 128, 2, true);
        if (by_dnn != (envs[e] == NULL))
            ZT_FAIL("ZT_CUDA_ATTN=%s: cuDNN %s the attention on the homes",
                    envs[e] ? envs[e] : "(unset)", by_dnn ? "ran" : "did not run");
        GPU->ctx_destroy(c);
    }
    printf("attention by cuDNN by default, by the kernels with ZT_CUDA_ATTN=fused: ok\n");
}

/* The tensor-core kernels work through as many sequences at a time as the scratch holds the
 * 16-bit copies (and deltas) of: with room for two, five sequences (quick: three) go in runs of
 * 2, 2, 1 (2, 1) and give the bits of one run of all (the op's full scratch), forward and
 * backward, also with 16-bit homes of qkv and out (each run's part of them written in forward,
 * the bits of cast, and read in backward, qkv and out there NaN; backward's bits those of out
 * rounded), where no copy of qkv is made and so the same room holds all: one run (counted on
 * the emulation by the forward's and the deltas' launches); a scratch that holds no sequence
 * is refused with an error, not overrun. */
static void test_attention_tc_runs(void)
{
    int B = QUICK ? 3 : 5, T = 70, C = 128, NH = 2;
    size_t n3 = (size_t)B * T * 3 * C, nC = (size_t)B * T * C, nL = (size_t)B * NH * T;
    size_t nS = zt_attention_scratch_floats(B, T, NH), small = zt_cuda_attn_tc_floats(2, T, C, NH);
    ASSERT_TRUE(nS >= zt_cuda_attn_tc_floats(1, T, C, NH) && small < nS);
    zt_kctx *keep = GC;
    GC = ctx_kernels_mm("bf16");
    float *qkv = kc_frandn(n3, 1.0), *dout = kc_frandn(nC, 1.0), *want = kc_falloc(n3);
    float *want_out = kc_falloc(nC), *want_lse = kc_falloc(nL);
    float *d_qkv = upf(qkv, n3), *d_dout = upf(dout, nC), *d_out = dalloc(nC * 4);
    float *d_lse = dalloc(nL * 4), *d_scr = dalloc((nS + 1) * 4), *d_dq = dalloc(n3 * 4);
    GPU->attention_forward(GC, d_out, d_lse, d_scr, d_qkv, NULL, B, T, C, NH);
    GPU->memset0(GC, d_dq, n3 * 4);
    GPU->attention_backward(GC, d_dq, d_scr, d_dout, d_qkv, d_out, d_lse, NULL, B, T, C, NH);
    GPU->copy_d2h(GC, want, d_dq, n3 * 4);
    GPU->copy_d2h(GC, want_out, d_out, nC * 4);
    GPU->copy_d2h(GC, want_lse, d_lse, nL * 4);
    uint16_t *want16 = zt_malloc(n3 * 2), *wo16 = zt_malloc(nC * 2), *d_home = dalloc(n3 * 2);
    uint16_t *d_ho = dalloc(nC * 2);
    float *nan3 = kc_falloc(n3), *want_h = kc_falloc(n3), *d_or = dalloc(nC * 4);
    ASSERT_TRUE(want16 && wo16);
    for (size_t i = 0; i < n3; i++)
        nan3[i] = NAN;
    float *d_nan = upf(nan3, n3);
    GPU->cast(GC, d_home, ZT_BF16, d_qkv, ZT_F32, n3);
    GPU->copy_d2h(GC, want16, d_home, n3 * 2);
    GPU->cast(GC, d_ho, ZT_BF16, d_out, ZT_F32, nC);
    GPU->copy_d2h(GC, wo16, d_ho, nC * 2);
    GPU->cast(GC, d_or, ZT_F32, d_ho, ZT_BF16, nC); /* backward's out from its home */
    GPU->memset0(GC, d_dq, n3 * 4);
    GPU->attention_backward(GC, d_dq, d_scr, d_dout, d_qkv, d_or, d_lse, NULL, B, T, C, NH);
    GPU->copy_d2h(GC, want_h, d_dq, n3 * 4);
    uint16_t *d_g16 = dalloc(n3 * 2), *wg16 = zt_malloc(n3 * 2), *wgd16 = zt_malloc(n3 * 2);
    uint16_t *d_do16 = dalloc(nC * 2);
    float *d_dow = dalloc(nC * 4);
    ASSERT_TRUE(wg16 && wgd16);
    GPU->cast(GC, d_do16, ZT_BF16, d_dout, ZT_F32, nC);
    GPU->cast(GC, d_dow, ZT_F32, d_do16, ZT_BF16, nC);
    GPU->cast(GC, d_g16, ZT_BF16, d_dq, ZT_F32, n3);
    GPU->copy_d2h(GC, wg16, d_g16, n3 * 2);
    gsync("attention, one run");
    for (int off = 0; off < 4; off++) { /* a scratch 16-byte aligned, then 4 bytes past that */
        uint16_t *home = off >= 2 ? d_home : NULL, *o16 = off >= 2 ? d_ho : NULL;
        GPU->memset0(GC, d_out, nC * 4);
        GPU->memset0(GC, d_lse, nL * 4);
        GPU->memset0(GC, d_home, n3 * 2);
        GPU->memset0(GC, d_ho, nC * 2);
        unsigned long long f0 = EMU_NAMED("attention_forward (fused");
        zt_cuda_attn_tc_forward(GC, d_out, d_lse, d_scr + off % 2, small, d_qkv, home, o16, B, T, C,
                                NH);
        int want_runs = home ? 1 : (B + 1) / 2; /* the runs' forward kernels, and deltas */
        if (EMU_COUNTS && EMU_NAMED("attention_forward (fused") - f0 != (unsigned)want_runs)
            ZT_FAIL("attention forward in runs (home %d): %llu runs, want %d", home != NULL,
                    EMU_NAMED("attention_forward (fused") - f0, want_runs);
        if (!o16) check_bits("attention forward in runs of two sequences", d_out, want_out, nC, 4);
        check_bits("attention forward in runs of two sequences (lse)", d_lse, want_lse, nL, 4);
        if (home) {
            check_bits("attention forward in runs of two sequences (home)", home, want16, n3, 2);
            check_bits("attention forward in runs of two sequences (out's home)", o16, wo16, nC, 2);
        }
        GPU->memset0(GC, d_dq, n3 * 4);
        unsigned long long b0 = EMU_NAMED("attention_backward (delta");
        zt_cuda_attn_tc_backward(GC, d_dq, NULL, d_scr + off % 2, small, d_dout, NULL,
                                 home ? d_nan : d_qkv, home, o16 ? d_nan : d_out, o16, d_lse, B, T,
                                 C, NH);
        if (EMU_COUNTS && EMU_NAMED("attention_backward (delta") - b0 != (unsigned)want_runs)
            ZT_FAIL("attention backward in runs (home %d): %llu runs, want %d", home != NULL,
                    EMU_NAMED("attention_backward (delta") - b0, want_runs);
        check_bits("attention backward in runs of two sequences", d_dq, o16 ? want_h : want, n3, 4);
        if (!home) continue;
        /* the gradient written rounded (each run's part): the cast of the fp32 one */
        GPU->memset0(GC, d_g16, n3 * 2);
        zt_cuda_attn_tc_backward(GC, d_nan, d_g16, d_scr + off % 2, small, d_dout, NULL, d_nan,
                                 home, d_nan, o16, d_lse, B, T, C, NH);
        check_bits("attention backward in runs of two sequences, 16-bit", d_g16, wg16, n3, 2);
        /* dO in 16 bits, each run's rows read in place (dout NaN): the bits of one run with
         * dout its widened values */
        zt_cuda_attn_tc_backward(GC, d_nan, d_g16, d_scr, nS, d_dow, NULL, d_nan, home, d_nan, o16,
                                 d_lse, B, T, C, NH);
        GPU->copy_d2h(GC, wgd16, d_g16, n3 * 2);
        GPU->memset0(GC, d_g16, n3 * 2);
        zt_cuda_attn_tc_backward(GC, d_nan, d_g16, d_scr + off % 2, small, d_nan, d_do16, d_nan,
                                 home, d_nan, o16, d_lse, B, T, C, NH);
        check_bits("attention backward in runs of two sequences, dO in 16 bits", d_g16, wgd16, n3,
                   2);
    }
    /* room for less than one sequence: an error, and nothing written */
    zt_kctx *ec = ctx_kernels_mm("bf16");
    GPU->memset0(GC, d_dq, n3 * 4);
    gsync("attention, zeros");
    zt_cuda_attn_tc_backward(ec, d_dq, NULL, d_scr, zt_cuda_attn_tc_floats(1, T, C, NH) - 4, d_dout,
                             NULL, d_qkv, NULL, d_out, NULL, d_lse, B, T, C, NH);
    zt_err err;
    zt_err_clear(&err);
    ASSERT_EQ_INT(GPU->sync(ec, &err), ZT_ERR_INVALID);
    printf("scratch too small: %s\n", zt_err_msg(&err));
    ASSERT_CONTAINS(err.msg, "holds the 16-bit copies of no sequence");
    GPU->ctx_destroy(ec);
    float *zero = kc_falloc(n3);
    memset(zero, 0, n3 * 4);
    check_bits("attention backward refused", d_dq, zero, n3, 4);
    dfree(d_qkv), dfree(d_dout), dfree(d_out), dfree(d_lse), dfree(d_scr), dfree(d_dq);
    dfree(d_home), dfree(d_nan), dfree(d_ho), dfree(d_or), dfree(d_g16), zt_free(wg16);
    dfree(d_do16), dfree(d_dow), zt_free(wgd16);
    GPU->ctx_destroy(GC);
    GC = keep;
    zt_free(qkv), zt_free(dout), zt_free(want), zt_free(want_out), zt_free(want_lse), zt_free(zero);
    zt_free(want16), zt_free(nan3), zt_free(wo16), zt_free(want_h);
    printf("attention in runs of sequences, ok\n");
}
#endif
#endif
