/* See types.h in this directory. */
#ifndef __BITS_PER_LONG
#define __BITS_PER_LONG 64
#endif
#include <asm-generic/bitsperlong.h>
