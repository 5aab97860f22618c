/* dyncount N: the loop of the `count` workload (qemu_glue/workloads/count.S) in a dynamically
 * linked C program, as a user builds one on the host (gcc -O2, no -static): glibc's start-up,
 * strtoul and printf run around it.  The loop is `spin` (spin.h: count.S's four instructions
 * and one conditional branch per iteration), so that two runs differ by the model's counts
 * of count_loop (tests/test_host_programs.py).
 */
#include <stdio.h>
#include <stdlib.h>

#include "spin.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s N\n", argv[0]);
        return 2;
    }
    unsigned long n = strtoul(argv[1], NULL, 10);
    printf("dyncount %lu: %lx\n", n, spin(n));
    return 0;
}
