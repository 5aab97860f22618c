/* Byte offsets of struct regs (rt.h) for the assembly.  rt.c checks them at compile time. */
#pragma once
#ifdef __x86_64__
#define RW 8
#else
#define RW 4
#endif
#define R_AX (0 * RW)
#define R_CX (1 * RW)
#define R_DX (2 * RW)
#define R_BX (3 * RW)
#define R_SP (4 * RW)
#define R_BP (5 * RW)
#define R_SI (6 * RW)
#define R_DI (7 * RW)
#ifdef __x86_64__
#define R_R8 (8 * RW)
#define R_R9 (9 * RW)
#define R_R10 (10 * RW)
#define R_R11 (11 * RW)
#define R_R12 (12 * RW)
#define R_R13 (13 * RW)
#define R_R14 (14 * RW)
#define R_R15 (15 * RW)
#define R_FLAGS (16 * RW)
#else
#define R_FLAGS (8 * RW)
#endif
