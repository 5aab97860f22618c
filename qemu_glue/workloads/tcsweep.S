/* tcsweep N: N passes through 9 blocks of code 4 KB apart: a program whose trace-cache misses
 * the memory model fixes (docs/memory-model.md, "The trace cache and self-modifying code").
 *
 * Freestanding (no libc): every user instruction is in this file.  The 9 blocks start 4 KB
 * apart, so their 64-byte lines are 64 lines apart: one set of the code-line record that
 * stands for the trace cache (512 lines, 8-way, true LRU), more lines than it has ways.  So
 * every block of every pass finds its line replaced since the pass before (whatever the
 * kernel ran in between), on every CPU model:
 *
 *     BPU_fetch_request TCMISS (user)     9 per pass
 *
 * plus the lines of the code outside the loop (PARSE_ARG1 and EXIT0 share the first page's
 * first lines), each missed once.
 *
 * The blocks are tcsweep_loop (the first) .. tcsweep_8 (global symbols for the tests).
 */
#include "sys.h"

        .text
        .globl  _start
        .type   _start, @function
_start:
        PARSE_ARG1
        mov     %eax, %ecx              /* passes */
        test    %ecx, %ecx
        jz      .Ldone
        jmp     tcsweep_loop
.Ldone:
        EXIT0

        .p2align 12
        .globl  tcsweep_loop
tcsweep_loop:
        jmp     tcsweep_1
        .irp    k, 1, 2, 3, 4, 5, 6, 7
        .p2align 12
        .globl  tcsweep_\k
tcsweep_\k:
        nop
        jmp     tcsweep_\k + 4096
        .endr
        .p2align 12
        .globl  tcsweep_8
tcsweep_8:
        dec     %ecx
        jnz     tcsweep_loop
        EXIT0
        .size   _start, . - _start

        .section .note.GNU-stack, "", @progbits
