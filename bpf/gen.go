package bpf

// The C programs are compiled by bpf2go into {xdp,wire}_bpfel.{go,o} and
// {xdp,wire}_bpfeb.{go,o}, which are committed so that `go build` needs no
// clang. `make generate` reruns this; CI checks the result matches the
// commit. wire.c uses BPF atomics (cmpxchg), hence -mcpu=v3.
//go:generate go tool bpf2go -tags linux -target bpfel,bpfeb -cflags "-O2 -g -Wall -Werror" -type flow4 -type counters -type fault xdp xdp.c -- -I./include
//go:generate go tool bpf2go -tags linux -target bpfel,bpfeb -cflags "-O2 -g -Wall -Werror -mcpu=v3" -type port -type fault -type counters wire wire.c -- -I./include
