/* hotspots N: two functions with the same loop, hot_a run 3*N times, hot_b N times.
 *
 * Freestanding (no libc).  Both functions hold the same instructions (aligned alike), so by
 * the clock model (docs/guest-events.md I6) every iteration of either costs the same number
 * of clocks, and hot_a takes exactly 3/4 of the clocks the two loops take together (up to
 * the one mispredicted loop exit per call).  Each iteration divides (DIV: tens of clocks in
 * the timing model, docs/timing.md), so the loops spend many clocks per emulated instruction
 * and a profile collects samples quickly.  Linked at its own address (workloads.py) like `count`.
 */
#include "sys.h"

        .text
        .globl  _start
        .type   _start, @function
_start:
        PARSE_ARG1
        mov     %eax, %edi
        mov     %eax, %ecx
        add     %ecx, %ecx
        add     %eax, %ecx
        call    hot_a
        mov     %edi, %ecx
        call    hot_b
        EXIT0
        .size   _start, . - _start

/* HOT(name): ecx iterations (ecx > 0) of a dependent division.  Only `name` is a symbol (so
 * that perf attributes the samples to the function); the tests find the loop from its size. */
#define HOT(name)                       \
        .p2align 6;                     \
        .globl  name;                   \
        .type   name, @function;        \
name:                                   \
        mov     $7, %ebx;               \
1:                                      \
        xor     %edx, %edx;             \
        mov     %ecx, %eax;             \
        div     %ebx;                   \
        dec     %ecx;                   \
        jnz     1b;                     \
        ret;                            \
        .size   name, . - name

HOT(hot_a)
HOT(hot_b)

        .section .note.GNU-stack, "", @progbits
