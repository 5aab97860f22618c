/* The events guest's fuzzer (fuzz.c): `fuzz SEED N EVERY [FROM COUNT]` in a script. */
#pragma once

#include "rt.h"

/* n operations of the stream of `seed`; a digest line "FZ <done> <digest> <#GP count> <PMIs>"
 * every `every` operations and at the end; "FZD ..." for operations from..from+count-1 */
void fuzz_run(u64 seed, u32 n, u32 every, u32 dump_from, u32 dump_n);
