/* A libFuzzer-free driver for fuzz_requests.c, so every build (gcc, sanitizers) runs the
 * target: the files named on the command line (a corpus, or crash reproducers), then seeds
 * built from valid messages of every request type, then seeded random mutations of them
 * for ZT_FUZZ_SECONDS (default 3). Reproducible: ZT_FUZZ_SEED picks the random stream. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/timeutil.h"
#include "proto/rpc.h"
#include "proto/zerotrain.pb-c.h"
#include "tests/fuzz/fuzz_requests.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

#define MAX_SEEDS 96
static uint8_t *seeds[MAX_SEEDS];
static size_t seed_len[MAX_SEEDS];
static int n_seeds;

static void add_seed(int type, const ProtobufCMessage *m)
{
    size_t n = 0;
    uint8_t *p = zt_pb_pack(m, &n);
    uint8_t *s = zt_malloc(n + 1);
    if (!p || !s || n_seeds >= MAX_SEEDS) exit(1);
    s[0] = (uint8_t)type;
    memcpy(s + 1, p, n);
    zt_free(p);
    seeds[n_seeds] = s;
    seed_len[n_seeds++] = n + 1;
}

static int type_index(const char *name)
{
    for (size_t i = 0; i < zt_fuzz_n_types; i++)
        if (strcmp(zt_fuzz_types[i].name, name) == 0) return (int)i;
    return 0;
}

static void make_seeds(void)
{
    Zt__V1__SubmitJobRequest s = ZT__V1__SUBMIT_JOB_REQUEST__INIT;
    s.job_text = "{\"name\": \"f\", \"model\": {\"arch\": \"gpt2\", \"n_layer\": 1, \"n_head\": 1, "
                 "\"n_embd\": 8, \"block_size\": 8, \"vocab_size\": 16}, \"data\": {\"train\": "
                 "\"d/*.bin\"}, \"train\": {\"steps\": 3}, \"resources\": {\"ranks\": 2}, "
                 "\"deepspeed\": {\"train_batch_size\": 4, \"zero_optimization\": {\"stage\": 2}}}";
    s.job_dir = "/tmp";
    s.job_path = "f.json";
    s.submit_key = "k";
    add_seed(type_index("SubmitJob"), &s.base);
    Zt__V1__HeartbeatRequest h = ZT__V1__HEARTBEAT_REQUEST__INIT;
    Zt__V1__WorkerStatus w = ZT__V1__WORKER_STATUS__INIT, *wp = &w;
    w.attempt_id = 3;
    w.rank = 1;
    w.phase = ZT__V1__WORKER_PHASE__WORKER_PHASE_EXITED;
    w.exit_code = 1;
    h.name = "n1";
    h.incarnation = 2;
    h.n_workers = 1;
    h.workers = &wp;
    add_seed(type_index("Heartbeat"), &h.base);
    Zt__V1__ReportMetricsRequest rm = ZT__V1__REPORT_METRICS_REQUEST__INIT;
    Zt__V1__StepMetrics st = ZT__V1__STEP_METRICS__INIT, *stp = &st;
    Zt__V1__Metric me = ZT__V1__METRIC__INIT, *mep = &me;
    me.key = "loss";
    me.value = 3.5;
    st.attempt_id = 1;
    st.step = 7;
    st.n_values = 1;
    st.values = &mep;
    rm.n_steps = 1;
    rm.steps = &stp;
    add_seed(type_index("ReportMetrics"), &rm.base);
    Zt__V1__RendezvousRequest rz = ZT__V1__RENDEZVOUS_REQUEST__INIT;
    rz.attempt_id = 1;
    rz.value.data = (uint8_t *)"tcp://h:1";
    rz.value.len = 9;
    rz.wait = ZT__V1__RENDEZVOUS_REQUEST__WAIT__WAIT_ALL;
    rz.wait_ms = 100;
    add_seed(type_index("Rendezvous"), &rz.base);
    Zt__V1__ListJobsRequest lj = ZT__V1__LIST_JOBS_REQUEST__INIT;
    Zt__V1__JobState states[2] = {ZT__V1__JOB_STATE__JOB_STATE_RUNNING, 9};
    lj.n_states = 2;
    lj.states = states;
    lj.limit = 10;
    add_seed(type_index("ListJobs"), &lj.base);
    Zt__V1__RegisterAgentRequest ra = ZT__V1__REGISTER_AGENT_REQUEST__INIT;
    Zt__V1__Gpu g = ZT__V1__GPU__INIT, *gp = &g;
    g.name = "H100";
    g.memory_total = 80;
    ra.name = "gpu-node";
    ra.device = ZT__V1__DEVICE__DEVICE_CUDA;
    ra.slots = 1;
    ra.n_gpus = 1;
    ra.gpus = &gp;
    add_seed(type_index("RegisterAgent"), &ra.base);
    Zt__V1__ReportCheckpointRequest rc = ZT__V1__REPORT_CHECKPOINT_REQUEST__INIT;
    rc.attempt_id = 1;
    rc.dir = "/c/step_1";
    rc.file = "rank_00000.zts";
    add_seed(type_index("ReportCheckpoint"), &rc.base);
    Zt__V1__GetLogsRequest gl = ZT__V1__GET_LOGS_REQUEST__INIT;
    int32_t ranks[2] = {0, 3};
    gl.job_id = 1;
    gl.n_ranks = 2;
    gl.ranks = ranks;
    add_seed(type_index("GetLogs"), &gl.base);
    /* who may call (0xff): each access class with each real credential, and none */
    for (int access = 0; access < 4; access++)
        for (int pick = 0; pick < 4; pick++) {
            uint8_t *r = zt_malloc(3);
            if (!r || n_seeds >= MAX_SEEDS) exit(1);
            r[0] = 0xff;
            r[1] = (uint8_t)(access | (pick == 3 ? 0x80 : 0));
            r[2] = (uint8_t)pick;
            seeds[n_seeds] = r;
            seed_len[n_seeds++] = 3;
        }
}

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_main: cannot read %s\n", path);
        return 1;
    }
    uint8_t *buf = zt_malloc(1 << 20);
    size_t n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    zt_free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (run_file(argv[i])) return 1;
    const char *sec = getenv("ZT_FUZZ_SECONDS");
    const char *seed = getenv("ZT_FUZZ_SEED");
    double seconds = sec ? atof(sec) : 3.0;
    rng_state = seed ? strtoull(seed, NULL, 10) : 0x9e3779b97f4a7c15ull;
    if (!rng_state) rng_state = 1;
    make_seeds();
    for (int i = 0; i < n_seeds; i++)
        LLVMFuzzerTestOneInput(seeds[i], seed_len[i]);
    /* every seed's bytes under every type */
    for (int i = 0; i < n_seeds; i++)
        for (size_t t = 0; t < zt_fuzz_n_types; t++) {
            seeds[i][0] = (uint8_t)t;
            LLVMFuzzerTestOneInput(seeds[i], seed_len[i]);
        }
    uint8_t buf[4096];
    double t0 = zt_now_s();
    long runs = 0;
    while (zt_now_s() - t0 < seconds) {
        for (int k = 0; k < 256; k++, runs++) {
            int s = (int)(rnd() % (uint64_t)n_seeds);
            size_t n = seed_len[s] < sizeof(buf) ? seed_len[s] : sizeof(buf);
            memcpy(buf, seeds[s], n);
            int edits = 1 + (int)(rnd() % 8);
            for (int e = 0; e < edits; e++) {
                switch (rnd() % 5) {
                case 0: /* flip a byte */
                    buf[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
                    break;
                case 1: /* a random byte */
                    buf[rnd() % n] = (uint8_t)rnd();
                    break;
                case 2: /* truncate */
                    n = 1 + (size_t)(rnd() % n);
                    break;
                case 3: /* append random bytes */
                    while (n < sizeof(buf) && rnd() % 4)
                        buf[n++] = (uint8_t)rnd();
                    break;
                default: /* a varint of extremes */
                    if (n + 10 < sizeof(buf)) {
                        size_t at = (size_t)(rnd() % n);
                        memmove(buf + at + 5, buf + at, n - at);
                        memset(buf + at, 0xff, 5);
                        n += 5;
                    }
                    break;
                }
            }
            buf[0] = (uint8_t)(rnd() % zt_fuzz_n_types);
            LLVMFuzzerTestOneInput(buf, n);
        }
    }
    for (int i = 0; i < n_seeds; i++)
        zt_free(seeds[i]);
    printf("fuzz_requests: %ld mutated inputs over %zu request types, no crash\n", runs,
           zt_fuzz_n_types);
    return 0;
}
