/* zerotrain: memory accounting (see memacct.h). */
#include "memacct.h"


static const char *const cat_names[ZT_MEM_CATEGORY_COUNT] = {
    "params", "master", "grads", "optim", "activations", "buffers", "comm", "host_optim", "ckpt",
};

const char *zt_mem_category_name(zt_mem_category cat)
{
    return (unsigned)cat < ZT_MEM_CATEGORY_COUNT ? cat_names[cat] : "?";
}

static void raise_peak(int64_t *peak, int64_t v)
{
    int64_t p = __atomic_load_n(peak, __ATOMIC_RELAXED);
    while (v > p && !__atomic_compare_exchange_n(peak, &p, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

void zt_memacct_charge(zt_memacct *m, zt_mem_category cat, int64_t bytes)
{
    if (!m || (unsigned)cat >= ZT_MEM_CATEGORY_COUNT)
        return;
    int64_t c = __atomic_add_fetch(&m->cur[cat], bytes, __ATOMIC_RELAXED);
    int64_t t = __atomic_add_fetch(&m->total_cur, bytes, __ATOMIC_RELAXED);
    raise_peak(&m->peak[cat], c);
    raise_peak(&m->total_peak, t);
}

int64_t zt_memacct_model_states(const zt_memacct *m)
{
    return m->cur[ZT_MEM_PARAMS] + m->cur[ZT_MEM_MASTER] + m->cur[ZT_MEM_GRADS] +
           m->cur[ZT_MEM_OPTIM] + m->cur[ZT_MEM_HOST_OPTIM];
}

void zt_memacct_reset_peaks(zt_memacct *m)
{
    for (int i = 0; i < ZT_MEM_CATEGORY_COUNT; i++)
        m->peak[i] = m->cur[i];
    m->total_peak = m->total_cur;
}
