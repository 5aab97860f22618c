/* stream N: N passes over an 8 MB buffer, one 4-byte load per 64-byte line: a program whose
 * memory-side counts the memory model fixes (docs/memory-model.md).  Built with STREAM_STORES
 * (the workload `wstream`) it stores instead: every store misses L2 (a read for ownership)
 * and, once L2 is full, each sector it replaces holds two modified lines (two write-backs).
 *
 * Freestanding (no libc): every user access is in this file.  Each pass loads from 131072
 * lines of 2048 pages in address order.  The buffer is 4 times the largest L2 of the CPU
 * models and the DTLB has 64 entries, so with true LRU every line is gone from L1 and L2, and
 * every page from the DTLB, when a pass comes back to it: every loop load misses L1 and L2
 * (the buffer is .bss: its first read maps Linux's zero page, and the caches are indexed by
 * linear address), and the first load of every page misses the DTLB.  So, per pass:
 *
 *     L1-dcache-load-misses, LLC-load-misses, cache-misses    131072
 *     dTLB-load-misses                                          2048
 *
 * plus the few loads outside the loop (PARSE_ARG1 reads the argument on the stack) and the
 * DTLB entries the kernel's interrupt handlers take from the loop while it runs.
 *
 * The loop is stream_loop .. stream_loop_end (global symbols for the tests).
 */
#include "sys.h"

#define LINES_PER_PASS 131072

        .text
        .globl  _start
        .type   _start, @function
_start:
        PARSE_ARG1
        mov     %eax, %ecx              /* passes */
        test    %ecx, %ecx
        jz      .Ldone
.Lpass:
        mov     $stream_buf, %esi
        mov     $LINES_PER_PASS, %edx
        .p2align 6
        .globl  stream_loop, stream_loop_end
stream_loop:
#ifdef STREAM_STORES
        mov     %eax, (SI)
#else
        mov     (SI), %eax
#endif
        add     $64, SI
        dec     %edx
        jnz     stream_loop
stream_loop_end:
        dec     %ecx
        jnz     .Lpass
.Ldone:
        EXIT0
        .size   _start, . - _start

        .bss
        .p2align 12
        .globl  stream_buf
stream_buf:
        .skip   LINES_PER_PASS * 64
        .size   stream_buf, LINES_PER_PASS * 64

        .section .note.GNU-stack, "", @progbits
