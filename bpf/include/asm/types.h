/* Architecture-neutral shim: BPF is a 64-bit target, so the generic
 * definitions apply. It keeps `make generate` independent of the host's
 * /usr/include/<triple>/asm directory. */
#include <asm-generic/types.h>
