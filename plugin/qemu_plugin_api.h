/*
 * p4pmu: our own declarations of the subset of QEMU's TCG plugin API (version 7, QEMU 11.1)
 * that the bridge uses.  No QEMU header is shipped by Debian's binary packages, so the plugin
 * carries these; every signature here was checked against QEMU 11.1.3's behaviour (see
 * docs/bridge.md, "API facts").  Only what the plugin calls is declared.
 *
 * The functions are resolved at load time against the qemu-system-x86_64 executable, which
 * exports them.  glib types are declared opaquely/minimally: we only use GArray's and
 * GByteArray's public {data, len} layout and the few glib functions below, which the QEMU
 * executable links in anyway (libglib-2.0).
 */
#ifndef P4PMU_QEMU_PLUGIN_API_H
#define P4PMU_QEMU_PLUGIN_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define P4PMU_EXPORT __attribute__((visibility("default")))

/* API level this plugin is written for (QEMU 11.1 reports min = cur = 7). */
#define P4PMU_QEMU_PLUGIN_VERSION 7

typedef uint64_t qemu_plugin_id_t;

typedef struct {
    const char *target_name;
    struct {
        int min;
        int cur;
    } version;
    bool system_emulation;
    union {
        struct {
            int smp_vcpus;
            int max_vcpus;
        } system;
    };
} p4_qemu_info_t;

struct qemu_plugin_tb;
struct qemu_plugin_insn;
struct qemu_plugin_register;
struct qemu_plugin_scoreboard;

/* glib containers as the plugin API hands them out (public glib layout). */
typedef struct {
    uint8_t *data;
    unsigned int len;
} p4_GByteArray;

typedef struct {
    char *data;
    unsigned int len;
} p4_GArray;

/* One element of qemu_plugin_get_registers()'s array. */
typedef struct {
    struct qemu_plugin_register *handle;
    const char *name;
    const char *feature;
    bool is_readonly;
} p4_reg_descriptor;

typedef struct {
    struct qemu_plugin_scoreboard *score;
    size_t offset;
} p4_plugin_u64;

enum p4_cb_flags {
    P4_CB_NO_REGS = 0,
    P4_CB_R_REGS = 1,
    P4_CB_RW_REGS = 2,
    P4_CB_RW_REGS_PC = 3,
};

enum p4_cond {
    P4_COND_NEVER = 0,
    P4_COND_ALWAYS,
    P4_COND_EQ,
    P4_COND_NE,
    P4_COND_LT,
    P4_COND_LE,
    P4_COND_GT,
    P4_COND_GE,
};

enum p4_inline_op {
    P4_INLINE_ADD_U64 = 0,
    P4_INLINE_STORE_U64 = 1,
};

enum p4_discon_type {
    P4_DISCON_INTERRUPT = 1,
    P4_DISCON_EXCEPTION = 2,
    P4_DISCON_HOSTCALL = 4,
};

/* Callback types (v7: every callback receives the userdata given at registration). */
enum p4_mem_rw {
    P4_MEM_R = 1,
    P4_MEM_W = 2,
    P4_MEM_RW = 3,
};

typedef uint32_t p4_meminfo_t;

/* The value a memory access loaded or stored (QEMU's qemu_plugin_mem_value) */
enum p4_mem_value_type {
    P4_MEM_VALUE_U8,
    P4_MEM_VALUE_U16,
    P4_MEM_VALUE_U32,
    P4_MEM_VALUE_U64,
    P4_MEM_VALUE_U128,
};
typedef struct {
    enum p4_mem_value_type type;
    union {
        uint8_t u8;
        uint16_t u16;
        uint32_t u32;
        uint64_t u64;
        struct {
            uint64_t low;
            uint64_t high;
        } u128;
    } data;
} p4_mem_value;

typedef void (*p4_udata_cb_t)(void *userdata);
typedef void (*p4_vcpu_mem_cb_t)(unsigned int vcpu_index, p4_meminfo_t info, uint64_t vaddr,
                                 void *userdata);
typedef void (*p4_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*p4_tb_trans_cb_t)(struct qemu_plugin_tb *tb, void *userdata);
typedef void (*p4_discon_cb_t)(unsigned int vcpu_index, enum p4_discon_type type, uint64_t from_pc,
                               uint64_t to_pc, void *userdata);

/* Registration */
void qemu_plugin_register_vcpu_init_cb(qemu_plugin_id_t id, p4_vcpu_udata_cb_t cb, void *userdata);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, p4_tb_trans_cb_t cb,
                                           void *userdata);
void qemu_plugin_register_vcpu_discon_cb(qemu_plugin_id_t id, enum p4_discon_type type,
                                         p4_discon_cb_t cb, void *userdata);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, p4_udata_cb_t cb, void *userdata);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, p4_vcpu_udata_cb_t cb,
                                            enum p4_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *insn, p4_vcpu_mem_cb_t cb,
                                      enum p4_cb_flags flags, enum p4_mem_rw rw, void *userdata);
void qemu_plugin_register_vcpu_tb_exec_cond_cb(struct qemu_plugin_tb *tb, p4_vcpu_udata_cb_t cb,
                                               enum p4_cb_flags flags, enum p4_cond cond,
                                               p4_plugin_u64 entry, uint64_t imm, void *userdata);

/* Translation-time queries */
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
size_t qemu_plugin_insn_data(const struct qemu_plugin_insn *insn, void *dest, size_t len);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);

/* A memory access's information (memory callbacks) */
unsigned int qemu_plugin_mem_size_shift(p4_meminfo_t info);
bool qemu_plugin_mem_is_store(p4_meminfo_t info);
p4_mem_value qemu_plugin_mem_get_value(p4_meminfo_t info);

/* Scoreboards (per-vCPU storage that inline ops and conditions can address) */
struct qemu_plugin_scoreboard *qemu_plugin_scoreboard_new(size_t element_size);
void *qemu_plugin_scoreboard_find(struct qemu_plugin_scoreboard *score, unsigned int vcpu);

/* Registers and memory (vCPU context only) */
p4_GArray *qemu_plugin_get_registers(void);
bool qemu_plugin_read_register(struct qemu_plugin_register *handle, p4_GByteArray *buf);
bool qemu_plugin_write_register(struct qemu_plugin_register *handle, p4_GByteArray *buf);
__attribute__((noreturn)) void qemu_plugin_set_pc(uint64_t vaddr);
bool qemu_plugin_read_memory_vaddr(uint64_t addr, p4_GByteArray *data, size_t len);
bool qemu_plugin_write_memory_vaddr(uint64_t addr, p4_GByteArray *data);

/* Inline operations, reset, physical memory, idle/resume (v7 signatures, checked against
 * QEMU 11.1.3's code: inline ops take the qemu_plugin_u64 by value; reset's callback gets
 * the userdata only) */
void qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(struct qemu_plugin_tb *tb,
                                                       enum p4_inline_op op, p4_plugin_u64 entry,
                                                       uint64_t imm);
void qemu_plugin_reset(qemu_plugin_id_t id, p4_udata_cb_t cb, void *userdata);
int qemu_plugin_read_memory_hwaddr(uint64_t addr, p4_GByteArray *data, size_t len);
bool qemu_plugin_translate_vaddr(uint64_t vaddr, uint64_t *hwaddr);
int qemu_plugin_write_memory_hwaddr(uint64_t addr, p4_GByteArray *data);
void qemu_plugin_register_vcpu_idle_cb(qemu_plugin_id_t id, p4_vcpu_udata_cb_t cb, void *userdata);
void qemu_plugin_register_vcpu_resume_cb(qemu_plugin_id_t id, p4_vcpu_udata_cb_t cb,
                                         void *userdata);

/* Misc */
void qemu_plugin_outs(const char *string);
bool qemu_plugin_bool_parse(const char *name, const char *val, bool *ret);

/* The few glib functions used (libglib-2.0 is linked into QEMU). */
p4_GByteArray *g_byte_array_new(void);
p4_GByteArray *g_byte_array_set_size(p4_GByteArray *array, unsigned int length);
p4_GByteArray *g_byte_array_append(p4_GByteArray *array, const uint8_t *data, unsigned int len);
char *g_array_free(p4_GArray *array, int free_segment);

#endif
