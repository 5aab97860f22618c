/* spin(n): the loop of the `count` workload (qemu_glue/workloads/count.S): four instructions
 * and one conditional branch per iteration, n iterations (none for n = 0). */
#ifndef SPIN_H
#define SPIN_H

__attribute__((__noinline__)) static unsigned long spin(unsigned long n)
{
    unsigned long acc = 0;
    if (n)
        __asm__ volatile(".p2align 6\n"
                         "1:\n\t"
                         "add %%ecx, %%edx\n\t"
                         "xor $0x5a, %%edx\n\t"
                         "dec %%ecx\n\t"
                         "jnz 1b"
                         : "+c"(n), "+d"(acc) : : "cc");
    return acc;
}

#endif
