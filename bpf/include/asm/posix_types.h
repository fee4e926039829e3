/* See types.h in this directory. */
#include <asm-generic/posix_types.h>
