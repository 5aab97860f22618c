/*
 * p4pmu: the accumulators of the current batch of a vCPU: adjacent-pair hash, kind
 * sequences and block portions added or removed, per-vCPU counting state allocation
 * (docs/guest-events.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "batch.h"
#include "counting.h"
#include "kinds.h"

static void pair_hash_init(struct pair_hash *h, uint32_t cap)
{
    h->cap = cap;
    h->n = 0;
    h->key = calloc(cap, sizeof(uint64_t));
    h->val = calloc(cap, sizeof(int64_t));
    h->used = malloc(cap * sizeof(uint32_t));
}

static void pair_hash_grow(struct pair_hash *h)
{
    struct pair_hash o = *h;
    pair_hash_init(h, o.cap * 2);
    for (uint32_t i = 0; i < o.n; i++) {
        uint32_t s = o.used[i];
        uint64_t k = o.key[s] - 1;
        if (o.val[s]) {
            pair_hash_add(h, (uint32_t)(k >> 32), (uint32_t)k, o.val[s]);
        }
    }
    free(o.key);
    free(o.val);
    free(o.used);
}

void pair_hash_add(struct pair_hash *h, uint32_t a, uint32_t b, int64_t n)
{
    if (!n) return;
    if (h->n * 2 >= h->cap) pair_hash_grow(h);
    uint64_t k = (((uint64_t)a << 32) | b) + 1;
    uint32_t i = (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 40) & (h->cap - 1);
    while (h->key[i] && h->key[i] != k) {
        i = (i + 1) & (h->cap - 1);
    }
    if (!h->key[i]) {
        h->key[i] = k;
        h->used[h->n++] = i;
    }
    h->val[i] += n;
}

void pair_hash_clear(struct pair_hash *h)
{
    for (uint32_t i = 0; i < h->n; i++) {
        h->key[h->used[i]] = 0;
        h->val[h->used[i]] = 0;
    }
    h->n = 0;
}

/* Add (sign +1) or remove (-1) a kind sequence of one execution portion. */
static void acc_seq(struct batch_vcpu *bt, const uint32_t *s, unsigned n, int os, int sign)
{
    for (unsigned i = 0; i < n; i++) {
        acc_add(bt, ext(s[i], os), sign);
        if (i) pair_hash_add(&bt->pairs, ext(s[i - 1], os), ext(s[i], os), sign);
    }
}

/* A portion [a, e) of an execution of b, as in the batch: clocks, internal pairs, its bubble
 * (a == 0: an execution start) and, if `ends`, its last clock as an execution end. */
void acc_portion(struct batch_vcpu *bt, const struct blk *b, unsigned a, unsigned e, int ends,
                 int sign)
{
    const uint32_t *s;
    unsigned n = portion_seq(b, a, e, &s);
    acc_seq(bt, s, n, b->os, sign);
    if (a == 0) bt->firsts[b->os ? 1 : 0] += sign;
    if (ends && n) acc_last_add(bt, ext(s[n - 1], b->os), sign);
}

void vcpu_counting_init(struct vcpu_counting *c)
{
    if (c->init) return;
    c->init = 1;
    c->batch.dirty = malloc(sizeof(uint32_t) * MAX_DIRTY);
    c->batch.acc = calloc(NEXT, sizeof(int64_t));
    c->batch.acc_last = calloc(NEXT, sizeof(int64_t));
    c->batch.touched = malloc(sizeof(uint32_t) * NEXT);
    c->batch.tmark = calloc(NEXT, 1);
    pair_hash_init(&c->batch.pairs, 1u << 12);
    c->fold.o_cap = 1024;
    c->fold.o_ext = malloc(sizeof(uint32_t) * c->fold.o_cap);
    c->fold.o_cnt = malloc(sizeof(int64_t) * c->fold.o_cap);
    c->fold.o_pcap = 1024;
    c->fold.o_pa = malloc(sizeof(uint32_t) * c->fold.o_pcap);
    c->fold.o_pb = malloc(sizeof(uint32_t) * c->fold.o_pcap);
    c->fold.o_pn = malloc(sizeof(int64_t) * c->fold.o_pcap);
}
