package bpf

// The C program is compiled by bpf2go into xdp_bpfel.{go,o} and
// xdp_bpfeb.{go,o}, which are committed so that `go build` needs no clang.
// `make generate` reruns this; CI checks the result matches the commit.
//go:generate go tool bpf2go -tags linux -target bpfel,bpfeb -cflags "-O2 -g -Wall -Werror" -type flow4 -type counters -type fault xdp xdp.c -- -I./include
