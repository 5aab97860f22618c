/*
 * p4pmu: the branch predictor of clockmodel.Predictor in C: predictor entries per vCPU, the
 * conditional-entry tables, return stack and indirect-branch targets (docs/guest-events.md
 * I5).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "predictor.h"
#include "state.h"

uint64_t *u64_map_get(struct u64_map *m, uint64_t k, int create)
{
    if (!m->cap) {
        if (!create) return NULL;
        m->cap = 1024;
        m->key = calloc(m->cap, 8);
        m->val = calloc(m->cap, 8);
    }
    if (create && m->n * 2 >= m->cap) {
        struct u64_map o = *m;
        m->cap *= 2;
        m->n = 0;
        m->key = calloc(m->cap, 8);
        m->val = calloc(m->cap, 8);
        for (uint32_t i = 0; i < o.cap; i++) {
            if (o.key[i]) *u64_map_get(m, o.key[i] - 1, 1) = o.val[i];
        }
        free(o.key);
        free(o.val);
    }
    uint64_t kk = k + 1;
    uint32_t i = (uint32_t)((kk * 0x9E3779B97F4A7C15ull) >> 32) & (m->cap - 1);
    while (m->key[i] && m->key[i] != kk)
        i = (i + 1) & (m->cap - 1);
    if (!m->key[i]) {
        if (!create) return NULL;
        m->key[i] = kk;
        m->val[i] = 0;
        m->n++;
    }
    return &m->val[i];
}

#define PCHUNK 4096

uint64_t *pred_entry(struct predictor_vcpu *p, uint32_t idx1)
{
    uint32_t i = idx1 - 1;
    return &p->pchunk[i / PCHUNK][i % PCHUNK];
}

/* the predictor entry of `key` in table m (created invalid), as an index + 1 */
uint32_t pred_entry_of(struct predictor_vcpu *p, struct u64_map *m, uint64_t key)
{
    uint64_t *v = u64_map_get(m, key, 1);
    if (!*v) {
        uint32_t i = p->pn++;
        if (i / PCHUNK >= 4096) { /* 16M branch addresses: share the last entry */
            p->pn--;
            i = p->pn - 1;
        } else if (!p->pchunk[i / PCHUNK]) {
            p->pchunk[i / PCHUNK] = calloc(PCHUNK, sizeof(uint64_t));
        }
        *v = i + 1;
    }
    return (uint32_t)*v;
}

/* the 2-bit counter's next state and prediction (clockmodel.Predictor) */
static const uint8_t cond_next[2][5] = {{2, 1, 1, 2, 3}, {3, 2, 3, 4, 4}};
static const uint8_t cond_pt[2][5] = {{0, 0, 0, 1, 1}, {1, 0, 0, 1, 1}};

static void cond_tables_fill(void)
{
    for (int t = 0; t < 2; t++)
        for (int back = 0; back < 2; back++)
            for (unsigned x = 0; x < 5; x++) {
                uint64_t e = x;
                unsigned m = 0;
                p4.cond_tab->replay[t][back][x][0] = (uint8_t)(x | 1u << 5);
                for (int k = 1; k <= 3; k++) {
                    unsigned p = (unsigned)cond_step(&e, back, t);
                    m += !p;
                    p4.cond_tab->replay[t][back][x][k] = (uint8_t)(e | m << 3 | p << 5);
                }
                p4.cond_tab->mmax[t][back][x] = (uint8_t)m;
            }
    for (int t = 0; t < 2; t++)
        for (int back = 0; back < 2; back++)
            for (unsigned x = 0; x < 5; x++)
                for (unsigned kk = 0; kk < 4; kk++)
                    for (int tk = 0; tk < 2; tk++) {
                        unsigned rp = p4.cond_tab->replay[t][back][x][kk];
                        uint64_t e = REPLAY_ENTRY(rp);
                        unsigned p = (unsigned)cond_step(&e, back, tk);
                        unsigned want = p4.cond_tab->mmax[t][back][e];
                        unsigned sat = e == (t ? 4u : 1u);
                        p4.cond_tab->fast[t][back][x][kk][tk] =
                            (uint16_t)(e | REPLAY_MISPREDICTED(rp) << 3 | p << 5 | want << 6 |
                                       sat << 8);
                    }
}

/* The conditional-entry tables, filled (the root object's cond_tab must point to them while
 * they are filled: cond_step reads them) */
struct cond_table_set *cond_tables_new(void)
{
    struct cond_table_set *t = aligned_alloc(64, sizeof(*t));
    if (!t) return NULL;
    memset(t, 0, sizeof(*t));
    memcpy(t->next, cond_next, sizeof(cond_next));
    memcpy(t->pt, cond_pt, sizeof(cond_pt));
    p4.cond_tab = t;
    cond_tables_fill();
    return t;
}

void pred_call(struct predictor_vcpu *p, uint64_t ret)
{
    if (p->rsb_n == P4P_RSB_DEPTH) {
        memmove(&p->rsb[0], &p->rsb[1], sizeof(uint64_t) * (P4P_RSB_DEPTH - 1));
        p->rsb_n--;
    }
    p->rsb[p->rsb_n++] = ret;
}

int pred_ret(struct predictor_vcpu *p, uint64_t target)
{
    if (!p->rsb_n) return 0;
    return p->rsb[--p->rsb_n] == target;
}

int pred_ind_e(uint64_t *e, uint64_t target)
{
    int ok = *e == target + 1;
    *e = target + 1;
    return ok;
}

int pred_ind(struct predictor_vcpu *p, uint64_t addr, uint64_t target)
{
    uint64_t i = P4P_BTB_ENTRIES ? addr % (P4P_BTB_ENTRIES ? P4P_BTB_ENTRIES : 1) : addr;
    return pred_ind_e(pred_entry(p, pred_entry_of(p, &p->btb, i)), target);
}
