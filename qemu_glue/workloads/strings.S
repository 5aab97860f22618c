/* strings N: N rounds of REP string instructions over two 16 KB buffers, every kind once:
 * REP STOSB (fill A), REP MOVSB (A to B), REP LODSB (read A), REPE CMPSB (A against B:
 * equal, all compared), REPNE SCASB (A for a byte it does not hold: all scanned).  Each
 * round runs 5 x 16,384 iterations in 5 REP instructions: a program whose time is in string
 * microcode, as the string section of Weaver's deterministic benchmark (ISPASS 2013) and
 * memcpy-heavy code are (`p4pmu bench --linux`).
 *
 * Freestanding (no libc): every user instruction is in this file.  The buffers are below
 * 4 GB on both architectures (linked at the workload's own address), so 32-bit registers
 * address them (a 32-bit MOV zero-extends into RSI/RDI/RCX on amd64).
 */
#include "sys.h"

#define BYTES 16384

        .text
        .globl  _start
        .type   _start, @function
_start:
        PARSE_ARG1
        mov     %eax, %ebp              /* rounds */
        cld
        test    %ebp, %ebp
        jz      2f
        .globl  strings_loop, strings_loop_end
strings_loop:
        mov     $strings_a, %edi        /* fill A with 0x5a */
        mov     $BYTES, %ecx
        mov     $0x5a, %eax
        rep stosb
        mov     $strings_a, %esi        /* copy A to B */
        mov     $strings_b, %edi
        mov     $BYTES, %ecx
        rep movsb
        mov     $strings_a, %esi        /* read A */
        mov     $BYTES, %ecx
        rep lodsb
        mov     $strings_a, %esi        /* compare A with B: equal */
        mov     $strings_b, %edi
        mov     $BYTES, %ecx
        repe cmpsb
        mov     $strings_a, %edi        /* scan A for 0xa5: absent */
        mov     $BYTES, %ecx
        mov     $0xa5, %eax
        repne scasb
        sub     $1, %ebp
        jnz     strings_loop
strings_loop_end:
2:      EXIT0
        .size   _start, . - _start

        .bss
        .p2align 12
strings_a:
        .skip   BYTES
strings_b:
        .skip   BYTES

        .section .note.GNU-stack, "", @progbits
