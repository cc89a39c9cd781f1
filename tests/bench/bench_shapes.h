/* zerotrain bench: the five linear layers of a GPT-2 block and head, shared by the CPU and GPU
 * op benchmarks (each at its own n_embd C and padded vocabulary VP). */
#ifndef ZT_TESTS_BENCH_SHAPES_H
#define ZT_TESTS_BENCH_SHAPES_H

typedef struct zt_bench_matmul {
    const char *name;
    int in, out;
} zt_bench_matmul;

/* the lm head comes last and has no bias */
#define ZT_BENCH_GPT2_MATMULS(C, VP)                                                               \
    {                                                                                              \
        {"qkv", (C), 3 * (C)}, {"attproj", (C), (C)}, {"fc", (C), 4 * (C)},                        \
            {"fcproj", 4 * (C), (C)}, {"lm head (no bias)", (C), (VP)},                            \
    }

#endif
