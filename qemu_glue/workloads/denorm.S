/* denorm N: N iterations of a few SSE and x87 instructions on denormal and normal inputs: a
 * program whose input assists (SSE_input_assist, x87_assist PREA) the plugin counts from the
 * inputs' values (emulator/fp_assist.py).  Linux starts a program with MXCSR at its reset value (DAZ clear),
 * so a denormal input requests an assist.
 *
 * Freestanding (no libc): every user instruction is in this file.  The inputs are read-only
 * data loaded through %ebx/%rbx; the tests replay the loop from the ELF's bytes
 * (tests/guests/sse_inputs.py).  The loop is denorm_loop .. denorm_loop_end.
 */
#include "sys.h"

#ifdef __x86_64__
#define BX %rbx
#else
#define BX %ebx
#endif

        .text
        .globl  _start
        .type   _start, @function
_start:
        PARSE_ARG1
        mov     %eax, %ecx              /* iterations */
        mov     $denorm_data, %ebx
        mov     $denorm_out, %esi
        test    %ecx, %ecx
        jz      .Ldone
        .p2align 6
        .globl  denorm_loop, denorm_loop_end
denorm_loop:
        movaps  (BX), %xmm0             /* 1.0, a denormal, 2.0, 3.0 */
        addps   16(BX), %xmm0           /* a denormal input: an assist */
        movsd   32(BX), %xmm1           /* 1.0 */
        mulsd   40(BX), %xmm1           /* a denormal double from memory: an assist */
        movaps  16(BX), %xmm2
        addps   %xmm2, %xmm2            /* normal inputs */
        flds    4(BX)                   /* a denormal single: an x87 input assist */
        fsts    (SI)                    /* stored as a single: an output assist */
        fstp    %st(0)
        dec     %ecx
        jnz     denorm_loop
denorm_loop_end:
.Ldone:
        EXIT0
        .size   _start, . - _start

        .section .rodata
        .p2align 4
        .globl  denorm_data
denorm_data:
        .long   0x3f800000, 0x00000001, 0x40000000, 0x40400000  /* 1.0, 2^-149, 2.0, 3.0 */
        .long   0x3f800000, 0x3f800000, 0x3fc00000, 0x40800000  /* 1.0, 1.0, 1.5, 4.0 */
        .quad   0x3ff0000000000000, 0x000fffffffffffff          /* 1.0, a double denormal */

        .bss
        .p2align 4
denorm_out:
        .skip   16

        .section .note.GNU-stack, "", @progbits
