/* zerotrain: the coordinator core — the state thread (one batch = one transaction: queued
 * operations, agent reports, timers, a scheduling pass; then the commit; then what the batch
 * changed is published to agents and watchers), and opening and closing the coordinator. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/coord_int.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"

#define MAX_BATCH 512

/* ---- the state thread ---------------------------------------------------------------------- */

void coord_enqueue(zt_coord *c, c_op *op)
{
    op->next = NULL;
    pthread_mutex_lock(&c->qmu);
    if (c->stop) {
        pthread_mutex_unlock(&c->qmu);
        op->done(c, op, false);
        return;
    }
    if (c->q_tail)
        c->q_tail->next = op;
    else
        c->q_head = op;
    c->q_tail = op;
    pthread_cond_signal(&c->qcv);
    pthread_mutex_unlock(&c->qmu);
}

void coord_wake_reports(zt_coord *c)
{
    pthread_mutex_lock(&c->qmu);
    if (!c->reports_pending) {
        c->reports_pending = true;
        pthread_cond_signal(&c->qcv);
    }
    pthread_mutex_unlock(&c->qmu);
}

static void timespec_at_ns(struct timespec *ts, uint64_t delta_ns)
{
    clock_gettime(CLOCK_REALTIME, ts);
    uint64_t ns = (uint64_t)ts->tv_nsec + delta_ns;
    ts->tv_sec += (time_t)(ns / 1000000000ull);
    ts->tv_nsec = (long)(ns % 1000000000ull);
}

static void *state_main(void *arg)
{
    zt_coord *c = arg;
    uint64_t tick_ns = (uint64_t)c->cfg.tick_ms * 1000000ull;
    uint64_t next_tick = zt_now_ns() + tick_ns;
    for (;;) {
        pthread_mutex_lock(&c->qmu);
        while (!c->q_head && !c->reports_pending && !c->stop) {
            uint64_t now = zt_now_ns();
            if (now >= next_tick) break;
            struct timespec ts;
            timespec_at_ns(&ts, next_tick - now);
            pthread_cond_timedwait(&c->qcv, &c->qmu, &ts);
        }
        c_op *ops = c->q_head;
        int nops = 0;
        c_op *last = NULL;
        for (c_op *o = ops; o && nops < MAX_BATCH; o = o->next) {
            last = o;
            nops++;
        }
        if (last) {
            c->q_head = last->next;
            if (!c->q_head) c->q_tail = NULL;
            last->next = NULL;
        }
        bool reports = c->reports_pending;
        c->reports_pending = false;
        bool stopping = c->stop;
        pthread_mutex_unlock(&c->qmu);
        if (stopping && !ops) break;

        uint64_t now = zt_now_ns();
        bool do_tick = now >= next_tick;
        if (do_tick) next_tick = now + tick_ns;

        pthread_mutex_lock(&c->mu);
        c->batch_failed = false;
        zt_err_clear(&c->batch_err);
        zt_err berr = {0};
        if (zt_store_begin(c->store, &berr) != ZT_OK) coord_db_failed(c, &berr);
        if (!c->batch_failed) {
            for (c_op *o = ops; o; o = o->next)
                o->run(c, o);
            if (reports || do_tick) {
                for (size_t i = 0; i < c->n_agents; i++) {
                    c_agent *a = c->agents[i];
                    if (a->reports_changed || a->revived) {
                        a->reports_changed = false;
                        coord_agent_reports(c, a);
                    }
                }
            }
            if (do_tick) coord_tick(c);
            if (c->sched_dirty) {
                c->sched_dirty = false;
                coord_schedule(c);
            }
        }
        pthread_mutex_unlock(&c->mu);

        bool committed = false;
        if (c->cfg.test_commit_delay_ms > 0 && (ops || reports))
            zt_sleep_ms(c->cfg.test_commit_delay_ms);
        if (!c->batch_failed) {
            zt_err cerr = {0};
            uint64_t t0 = zt_now_ns();
            if (zt_store_commit(c->store, &cerr) == ZT_OK)
                committed = true;
            else
                coord_db_failed(c, &cerr);
            coord_hist_observe(&c->commit_hist, zt_now_ns() - t0);
        }
        pthread_mutex_lock(&c->mu);
        if (committed) {
            coord_publish(c);
        } else {
            ZT_ERROR("coord", "batch of %d operation(s) rolled back: %s", nops,
                     zt_err_msg(&c->batch_err));
            zt_store_rollback(c->store);
            coord_model_reload(c);
        }
        coord_api_batch_end(c, committed);
        pthread_mutex_unlock(&c->mu);
        coord_logs_wake(c);
        for (c_op *o = ops; o;) {
            c_op *n = o->next;
            o->done(c, o, committed);
            o = n;
        }
    }
    return NULL;
}

/* ---- open / close --------------------------------------------------------------------------- */

static void set_defaults(zt_coord_config *cfg)
{
    if (cfg->heartbeat_interval_ms <= 0) cfg->heartbeat_interval_ms = 1000;
    if (cfg->heartbeat_timeout_ms <= 0) cfg->heartbeat_timeout_ms = 10000;
    if (cfg->hang_timeout_ms <= 0) cfg->hang_timeout_ms = 600000;
    if (cfg->restart_backoff_ms < 0) cfg->restart_backoff_ms = 2000;
    if (cfg->restart_backoff_max_ms <= 0) cfg->restart_backoff_max_ms = 300000;
    if (cfg->tick_ms <= 0) cfg->tick_ms = 100;
    if (cfg->metrics_max_points <= 0) cfg->metrics_max_points = 2000;
    if (cfg->logs_max_lines <= 0) cfg->logs_max_lines = 100000;
    if (cfg->max_log_streams <= 0) cfg->max_log_streams = 64;
    if (cfg->max_watchers <= 0) cfg->max_watchers = 1024;
    if (cfg->max_watchers_per_job <= 0) cfg->max_watchers_per_job = 64;
    if (cfg->max_rdzv_waiters <= 0) cfg->max_rdzv_waiters = 16384;
    if (cfg->max_rdzv_waiters_per_rank <= 0) cfg->max_rdzv_waiters_per_rank = 2;
    if (!cfg->version) cfg->version = "0";
}

/* Frees the agents, both store handles and the model's tables, once no thread uses them (the
 * jobs have been dropped already). */
static void release_model(zt_coord *c)
{
    pthread_mutex_lock(&c->mu);
    while (c->n_agents)
        coord_agent_remove(c, c->agents[c->n_agents - 1]);
    pthread_mutex_unlock(&c->mu);
    zt_store_close(c->rstore);
    zt_store_close(c->store);
    zt_free(c->grave);
    zt_free(c->agent_hash);
    zt_free(c->att_hash);
    zt_free(c->agents);
    zt_free(c->jobs);
    zt_free(c->atts);
}

zt_status zt_coord_open(zt_coord **out, const zt_coord_config *cfg, zt_err *err)
{
    *out = NULL;
    zt_coord *c = zt_calloc(1, sizeof(*c));
    if (!c) return zt_err_set(err, ZT_ERR_NOMEM, "coordinator: out of memory");
    c->cfg = *cfg;
    set_defaults(&c->cfg);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->qmu, NULL);
    pthread_cond_init(&c->qcv, NULL);
    pthread_mutex_init(&c->rmu, NULL);
    pthread_cond_init(&c->rcv, NULL);
    pthread_mutex_init(&c->lmu, NULL);
    pthread_cond_init(&c->lcv, NULL);
    pthread_mutex_init(&c->hsmu, NULL);
    c->agent_buckets = 4096;
    c->agent_hash = zt_calloc(c->agent_buckets, sizeof(*c->agent_hash));
    c->att_buckets = 4096;
    c->att_hash = zt_calloc(c->att_buckets, sizeof(*c->att_hash));
    c->started_ns = zt_now_ns();
    c->desired_seq = coord_now_ms() * 1000;
    zt_status st;
    if (!c->agent_hash || !c->att_hash) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "coordinator: out of memory");
        goto fail;
    }
    if ((st = zt_store_open(&c->store, c->cfg.db_path, false, err)) != ZT_OK) goto fail;
    if ((st = zt_store_open(&c->rstore, c->cfg.db_path, true, err)) != ZT_OK) goto fail;
    pthread_mutex_lock(&c->mu);
    st = coord_model_load(c, err);
    for (size_t i = 0; i < c->n_agents; i++)
        if (c->agents[i]->desired_dirty) coord_agent_build_desired(c, c->agents[i]);
    pthread_mutex_unlock(&c->mu);
    if (st != ZT_OK) goto fail;
    ZT_INFO("coord", "loaded %zu live job(s), %zu active attempt(s), %zu agent(s) from %s",
            c->n_jobs, c->n_atts, c->n_agents, c->cfg.db_path);
    if (pthread_create(&c->state_thread, NULL, state_main, c) != 0) {
        st = zt_err_set(err, ZT_ERR_INTERNAL, "coordinator: cannot start the state thread");
        goto fail;
    }
    if (pthread_create(&c->reader_thread, NULL, coord_reader_main, c) != 0) {
        pthread_mutex_lock(&c->qmu);
        c->stop = true;
        pthread_cond_signal(&c->qcv);
        pthread_mutex_unlock(&c->qmu);
        pthread_join(c->state_thread, NULL);
        st = zt_err_set(err, ZT_ERR_INTERNAL, "coordinator: cannot start the reader thread");
        goto fail;
    }
    atomic_store(&c->serving, true);
    *out = c;
    return ZT_OK;
fail:
    pthread_mutex_lock(&c->mu);
    coord_model_drop_jobs(c, "shutting down");
    pthread_mutex_unlock(&c->mu);
    release_model(c);
    zt_free(c);
    return st;
}

size_t zt_coord_methods(zt_coord *c, zt_rpc_method *methods, size_t cap)
{
    return coord_rpc_methods(c, methods, cap);
}

void zt_coord_stop_serving(zt_coord *c)
{
    if (!c || !atomic_exchange(&c->serving, false)) return;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_jobs; i++)
        coord_end_watchers(c, c->jobs[i], ZT_RPC_UNAVAILABLE,
                           "the coordinator is shutting down; watch again when it is back");
    for (size_t i = 0; i < c->n_atts; i++)
        coord_fail_waiters(c, c->atts[i], "the coordinator is shutting down; retry the rendezvous");
    for (c_watcher *w = c->health_watchers; w;) {
        c_watcher *n = w->next;
        Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        r.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
        zt_rpc_stream_send(w->call, &r.base);
        zt_rpc_stream_finish(w->call, ZT_RPC_OK, NULL);
        zt_rpc_call_unref(w->call);
        zt_free(w);
        c->n_watchers--;
        w = n;
    }
    c->health_watchers = NULL;
    pthread_mutex_unlock(&c->mu);
    coord_logs_stop(c);
}

void zt_coord_drain(zt_coord *c)
{
    if (!c) return;
    zt_coord_stop_serving(c);
    pthread_mutex_lock(&c->qmu);
    bool was = c->stop;
    c->stop = true;
    pthread_cond_signal(&c->qcv);
    pthread_mutex_unlock(&c->qmu);
    if (was) return;
    pthread_join(c->state_thread, NULL);
    pthread_mutex_lock(&c->rmu);
    c->rstop = true;
    pthread_cond_signal(&c->rcv);
    pthread_mutex_unlock(&c->rmu);
    pthread_join(c->reader_thread, NULL);
    coord_logs_stop(c); /* waits for the log streams to end */
    pthread_mutex_lock(&c->mu);
    coord_model_drop_jobs(c, "the coordinator is shutting down; retry when it is back");
    pthread_mutex_unlock(&c->mu);
}

void zt_coord_close(zt_coord *c)
{
    if (!c) return;
    zt_coord_drain(c);
    coord_api_close(c);
    release_model(c);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->qmu);
    pthread_cond_destroy(&c->qcv);
    pthread_mutex_destroy(&c->rmu);
    pthread_cond_destroy(&c->rcv);
    pthread_mutex_destroy(&c->lmu);
    pthread_cond_destroy(&c->lcv);
    pthread_mutex_destroy(&c->hsmu);
    zt_free(c);
}
