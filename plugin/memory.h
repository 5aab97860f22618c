/*
 * memory.h: what memory.c offers.  memory.c: the memory side of counting
 * (docs/memory-model.md): the memory level (a memory callback on every instruction while a
 * counter may count a memory-side event), each vCPU's memory model (memmodel.c) fed the
 * guest's accesses, and the corrections that put an access's outcome into the clock its
 * instruction retires in.
 */
#ifndef P4PMU_MEMORY_H
#define P4PMU_MEMORY_H

#include "counting_types.h"
#include "qemu_plugin_api.h"
#include "state.h"

/* the memory level of the run (switched by a flush: flush.c mem_update) */
struct memory_level_state {
    volatile int active; /* what blocks translated now feed the model: P4_MEM_DATA (memory
                            * callbacks) | P4_MEM_FETCH (an ITLB look-up per execution) |
                            * P4_MEM_CODE (the lines of each execution's code looked up and
                            * recorded: the trace cache; stores looked up in the record) |
                            * P4_MEM_SB (stores buffered,
                            * loads checked against them) */
    unsigned installs, removals, streak;
};


static inline int memory_level_active(void)
{
    return __atomic_load_n(&p4.memlvl->active, __ATOMIC_ACQUIRE);
}

/* A vCPU's memory side: its memory model, the corrections of the block execution under way,
 * the final clock of the last resolution as corrected (ext kind + 1, 0: as its variant;
 * res_fill), statistics */
struct memory_vcpu {
    struct mm_state *mm;
    struct mem_exec mx;
    uint32_t res_fin;
    uint64_t accesses, fixes, dropped, elsewhere, tlb_flushes;
    uint64_t stall_clocks; /* timing=memory: the clocks loads' misses added */
};

/* instruction i of block id (the execution under way) gets the memory fields d (fields of
 * the clock it retires in: clockmodel.MEMORY_FIELDS) */
void mem_fields_at(unsigned vi, uint32_t id, unsigned i, const uint8_t *d);
/* a memory access of instruction (ud & 1023) of block (ud >> 10) */
void cb_mem(unsigned int vi, p4_meminfo_t info, uint64_t vaddr, void *ud);
/* the execution of block ud begins: its instruction fetch's ITLB look-ups, its code lines */
void cb_fetch(unsigned int vi, void *ud);
/* translation: the memory callbacks of block `id`'s n instructions */
void mem_register(struct qemu_plugin_tb *tb, size_t n, uint32_t id);

/* the kind (no CPL bit) static clock j of the execution of b (block id) under way has now,
 * and its last static clock's */
uint32_t mem_kind_at(const struct vcpu_counting *c, uint32_t id, const struct blk *b, unsigned j);
uint32_t mem_last_kind(const struct vcpu_counting *c, uint32_t id, const struct blk *b);
/* seq[0..n) = the ext kinds of clocks j0.. of the execution of b (block id) under way (clock 0:
 * its bubble), as its memory fields corrected them */
void mem_patch_seq(const struct vcpu_counting *c, uint32_t id, const struct blk *b, uint32_t *seq,
                   unsigned n, unsigned j0);

/* the dynamic end of block pid resolved as variant v (its default final clock and the pairs
 * with it are, or will be at the fold, in the batch): the final clock's memory fields and the
 * pair with a corrected last static clock; c->mem.res_fin says what the final clock became */
void mem_resolved(unsigned vi, struct vcpu_counting *c, uint32_t pid, const struct blk *pb,
                  unsigned v);
/* REP: its final clock's fields get the memory fields; *prev (ext kind of the clock before
 * REP's clocks) becomes the corrected one */
void mem_rep_final(struct vcpu_counting *c, uint32_t pid, const struct blk *pb, uint8_t *f,
                   uint32_t *prev);
/* a PMU access splits the execution of b (block id) under way after static clock j: the
 * pairs of its fixed clocks with the clock after j are not in this batch */
void mem_split_before(struct vcpu_counting *c, uint32_t id, const struct blk *b, unsigned j);
/* the execution of block id is cut short: its corrections are undone (its accesses' outcomes
 * are not counted) */
void mem_cut(struct vcpu_counting *c, uint32_t id);
/* Is the execution of block id under way built into the trace cache?  (Its clocks were all
 * corrected at its entry: a PMU access that splits it cuts it, mem_cut.) */
int mem_built(const struct vcpu_counting *c, uint32_t id);
/* around a fold: the execution under way keeps its identity and pending final fields; its
 * corrections so far went into the folded batch */
int mem_fold_begin(const struct vcpu_counting *c);
void mem_fold_end(struct vcpu_counting *c, int keep);

/* the memory level starts feeding `added` (P4_MEM_DATA: the DTLB and caches, P4_MEM_FETCH:
 * the ITLB, P4_MEM_CODE: the code-line record, P4_MEM_SB: the store buffers; all vCPUs
 * stopped): those parts of every model start empty, so that what they
 * see does not depend on when the level was off (docs/memory-model.md); every model takes
 * up the parts `on` feeds (the code-line record and the store buffers looked up or not) */
void mem_models_reset(int added, int on);

void mem_report(unsigned vi, const struct memory_vcpu *mv);

#endif
