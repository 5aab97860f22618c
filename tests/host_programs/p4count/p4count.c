// SPDX-License-Identifier: GPL-2.0
/* p4count: a kernel module that counts its own instructions with the NetBurst PMU.
 *
 * At load, three times (n1, n2, then n1 again), with interrupts off: zero IQ_COUNTER0,
 * select instr_retired NBOGUSNTAG at CPL 0 in CRU_ESCR0, enable the counter in IQ_CCCR0
 * (SDM Vol. 3B 18.15.4), run spin.h's loop (the `count` workload's: four instructions and one
 * conditional branch per iteration), disable, read.  It prints "p4count N COUNT" for each and
 * restores the registers.  tests/test_guest_module.py copies spin.h (tests/host_programs/)
 * beside this file and writes values.h, the register numbers and values, from the project's
 * register and event tables.
 */
#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/irqflags.h>
#include <asm/msr.h>

#include "spin.h"
#include "values.h"

static unsigned long n1 = 100000, n2 = 300000;
module_param(n1, ulong, 0444);
module_param(n2, ulong, 0444);

static u64 measure(unsigned long n)
{
	unsigned long flags;
	u64 escr, cccr, value;

	local_irq_save(flags);
	rdmsrl(P4COUNT_ESCR_MSR, escr);
	rdmsrl(P4COUNT_CCCR_MSR, cccr);
	wrmsrl(P4COUNT_COUNTER_MSR, 0);
	wrmsrl(P4COUNT_ESCR_MSR, P4COUNT_ESCR_VALUE);
	wrmsrl(P4COUNT_CCCR_MSR, P4COUNT_CCCR_VALUE);
	spin(n);
	wrmsrl(P4COUNT_CCCR_MSR, cccr);
	rdmsrl(P4COUNT_COUNTER_MSR, value);
	wrmsrl(P4COUNT_ESCR_MSR, escr);
	local_irq_restore(flags);
	return value;
}

static int __init p4count_init(void)
{
	unsigned long n[] = { n1, n2, n1 };
	int i;

	for (i = 0; i < 3; i++)
		pr_info("p4count %lu %llu\n", n[i], measure(n[i]));
	return 0;
}

static void __exit p4count_exit(void)
{
}

module_init(p4count_init);
module_exit(p4count_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("counts its own instructions with the NetBurst PMU (p4pmu's tests)");
