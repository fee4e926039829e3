/*
 * mpitest.c: an MPI job of two ranks whose every result is checked, for
 * running Open MPI over xrnic (abi/test/mpi_test.go). Point-to-point of
 * many sizes (blocking, then both directions at once), collectives, and
 * one-sided Put/Get/Accumulate when the MPI library offers a window on
 * this transport. Prints "ok NAME ..." or "FAIL NAME: why" per check
 * (rank 0 speaks for both), then "mpitest: N failed"; exits 1 on a
 * failure.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, failures;

static void result(const char *name, int bad, const char *detail)
{
	int any = 0;

	MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (any)
		failures++;
	if (rank != 0)
		return;
	if (any)
		printf("FAIL %s: %s\n", name, detail);
	else
		printf("ok %s %s\n", name, detail);
	fflush(stdout);
}

/* A pattern no two (size, seed) pairs share at the same offset. */
static void fill(uint8_t *p, size_t n, unsigned seed)
{
	uint32_t x = 2166136261u ^ seed ^ (uint32_t)n;

	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (uint8_t)(x >> 24);
	}
}

static size_t mismatch(const uint8_t *p, size_t n, unsigned seed)
{
	uint8_t *want = malloc(n ? n : 1);
	size_t bad = (size_t)-1;

	fill(want, n, seed);
	for (size_t i = 0; i < n; i++)
		if (p[i] != want[i]) {
			bad = i;
			break;
		}
	free(want);
	return bad;
}

static const int sizes[] = { 0, 1, 7, 64, 1000, 4096, 8192, 65536, 262144, 1 << 20, 4 << 20 };
#define NSIZES (int)(sizeof(sizes) / sizeof(sizes[0]))

/* Rank 0 sends, rank 1 checks and answers with the next seed. */
static void pingpong(void)
{
	uint8_t *buf = malloc(4 << 20);
	char detail[128];
	int bad = 0;
	size_t at = (size_t)-1;
	int badsize = -1;

	for (int s = 0; s < NSIZES && !bad; s++) {
		int n = sizes[s];

		for (int iter = 0; iter < 3; iter++) {
			unsigned seed = (unsigned)(s * 16 + iter);

			if (rank == 0) {
				fill(buf, n, seed);
				MPI_Send(buf, n, MPI_BYTE, 1, s, MPI_COMM_WORLD);
				memset(buf, 0, n);
				MPI_Recv(buf, n, MPI_BYTE, 1, s, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				at = mismatch(buf, n, seed + 1000);
			} else {
				MPI_Status st;
				int got;

				MPI_Recv(buf, n, MPI_BYTE, 0, s, MPI_COMM_WORLD, &st);
				MPI_Get_count(&st, MPI_BYTE, &got);
				at = got != n ? 0 : mismatch(buf, n, seed);
				fill(buf, n, seed + 1000);
				MPI_Send(buf, n, MPI_BYTE, 0, s, MPI_COMM_WORLD);
			}
			if (at != (size_t)-1) {
				bad = 1;
				badsize = n;
				break;
			}
		}
	}
	if (bad)
		snprintf(detail, sizeof(detail), "size %d: first wrong byte at %zu", badsize, at);
	else
		snprintf(detail, sizeof(detail), "%d sizes, 0 to %d bytes, 3 round trips each", NSIZES,
			 sizes[NSIZES - 1]);
	result("pingpong", bad, detail);
	free(buf);
}

/* Both ranks send and receive at once, nonblocking, many messages. */
static void exchange(void)
{
	enum { N = 32, SZ = 16384 };
	uint8_t *out = malloc(N * SZ), *in = malloc(N * SZ);
	MPI_Request req[2 * N];
	int peer = 1 - rank, bad = 0;

	for (int i = 0; i < N; i++) {
		fill(out + i * SZ, SZ, 7000 + rank * 100 + i);
		MPI_Irecv(in + i * SZ, SZ, MPI_BYTE, peer, i, MPI_COMM_WORLD, &req[i]);
	}
	for (int i = 0; i < N; i++)
		MPI_Isend(out + i * SZ, SZ, MPI_BYTE, peer, i, MPI_COMM_WORLD, &req[N + i]);
	MPI_Waitall(2 * N, req, MPI_STATUSES_IGNORE);
	for (int i = 0; i < N && !bad; i++)
		bad = mismatch(in + i * SZ, SZ, 7000 + peer * 100 + i) != (size_t)-1;
	result("exchange", bad, "32 x 16 KiB each way, Isend/Irecv");
	free(out);
	free(in);
}

static void collectives(void)
{
	enum { N = 100000 };
	int64_t *v = malloc(N * sizeof(*v)), *sum = malloc(N * sizeof(*v));
	int bad = 0, gathered[2] = { -1, -1 }, a2a_out[2], a2a_in[2];
	uint8_t *b = malloc(1 << 20);

	for (int i = 0; i < N; i++)
		v[i] = (int64_t)i * (rank + 1);
	MPI_Allreduce(v, sum, N, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
	for (int i = 0; i < N && !bad; i++)
		bad = sum[i] != (int64_t)i * 3;
	result("allreduce", bad, "100000 int64 sums");

	if (rank == 0)
		fill(b, 1 << 20, 4242);
	MPI_Bcast(b, 1 << 20, MPI_BYTE, 0, MPI_COMM_WORLD);
	result("bcast", mismatch(b, 1 << 20, 4242) != (size_t)-1, "1 MiB from rank 0");

	MPI_Allgather(&rank, 1, MPI_INT, gathered, 1, MPI_INT, MPI_COMM_WORLD);
	result("allgather", gathered[0] != 0 || gathered[1] != 1, "ranks");

	a2a_out[0] = rank * 10;
	a2a_out[1] = rank * 10 + 1;
	MPI_Alltoall(a2a_out, 1, MPI_INT, a2a_in, 1, MPI_INT, MPI_COMM_WORLD);
	result("alltoall", a2a_in[0] != rank || a2a_in[1] != 10 + rank, "one int each way");

	MPI_Barrier(MPI_COMM_WORLD);
	result("barrier", 0, "");
	free(v);
	free(sum);
	free(b);
}

/* One-sided, when a window can be made: rank 0 puts into rank 1's
   window, gets it back, and both accumulate into rank 0's. */
static void onesided(void)
{
	enum { N = 4096 };
	int64_t *mem, *loc = malloc(N * sizeof(*loc));
	MPI_Win win;
	int err, bad = 0, avail, all;
	char detail[MPI_MAX_ERROR_STRING + 64] = "";

	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	err = MPI_Win_allocate(N * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
	avail = err == MPI_SUCCESS;
	MPI_Allreduce(&avail, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (!all) {
		int len = 0;

		if (!avail)
			MPI_Error_string(err, detail, &len);
		if (rank == 0)
			printf("skip onesided: no MPI window on this transport (%s)\n", avail ? "the other rank's" : detail);
		if (avail)
			MPI_Win_free(&win);
		free(loc);
		return;
	}
	for (int i = 0; i < N; i++)
		mem[i] = 0;
	MPI_Win_fence(0, win);
	if (rank == 0) {
		for (int i = 0; i < N; i++)
			loc[i] = (int64_t)i * 7 + 1;
		MPI_Put(loc, N, MPI_INT64_T, 1, 0, N, MPI_INT64_T, win);
	}
	MPI_Win_fence(0, win);
	if (rank == 0) {
		memset(loc, 0, N * sizeof(*loc));
		MPI_Get(loc, N, MPI_INT64_T, 1, 0, N, MPI_INT64_T, win);
	}
	MPI_Win_fence(0, win);
	if (rank == 0)
		for (int i = 0; i < N && !bad; i++)
			bad = loc[i] != (int64_t)i * 7 + 1;
	if (rank == 1)
		for (int i = 0; i < N && !bad; i++)
			bad = mem[i] != (int64_t)i * 7 + 1;
	for (int i = 0; i < N; i++)
		loc[i] = rank + 1;
	MPI_Accumulate(loc, N, MPI_INT64_T, 0, 0, N, MPI_INT64_T, MPI_SUM, win);
	MPI_Win_fence(0, win);
	if (rank == 0)
		for (int i = 0; i < N && !bad; i++)
			bad = mem[i] != 3;
	result("onesided", bad, "Put, Get, Accumulate of 4096 int64 with fences");
	MPI_Win_free(&win);
	free(loc);
}

int main(int argc, char **argv)
{
	int size;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		if (rank == 0)
			fprintf(stderr, "mpitest: run with 2 ranks, not %d\n", size);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	pingpong();
	exchange();
	collectives();
	onesided();
	if (rank == 0)
		printf("mpitest: %d failed\n", failures);
	MPI_Finalize();
	return failures ? 1 : 0;
}
