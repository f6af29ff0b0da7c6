/* tracer_buckets.h: the bucket of a value in tracer's histograms, for the
 * programs tracer generates for in-kernel aggregations (engine/kernel/: the
 * code generator writes this text into each program that keeps a histogram).
 *
 * The same functions as engine/common/include/tracer/common/buckets.hpp, which
 * the hist, lhist and quantiles stages use in user space: a key placed in the
 * kernel lands in the buckets it would have in user space.
 * tests/engine/kernel/buckets_test.cpp compiles this file on the host and
 * holds every function equal to its C++ twin.
 *
 * Plain C with __s64/__u64/__u32 and __always_inline only (a host test defines
 * them); no helpers, no maps. */
#ifndef TRACER_BUCKETS_H
#define TRACER_BUCKETS_H

/* bit_width(u) - 1 of a non-zero u: the index of its highest set bit. */
static __always_inline __u32 tr_log2_floor(__u64 u)
{
	__u32 e = 0;

	if (u >> 32) {
		u >>= 32;
		e += 32;
	}
	if (u >> 16) {
		u >>= 16;
		e += 16;
	}
	if (u >> 8) {
		u >>= 8;
		e += 8;
	}
	if (u >> 4) {
		u >>= 4;
		e += 4;
	}
	if (u >> 2) {
		u >>= 2;
		e += 2;
	}
	if (u >> 1)
		e += 1;
	return e;
}

/* hist (log2_bucket_of): 0 negative, 1 zero, 2 one, then [2^k, 2^(k+1)) at
 * k + 2; 66 buckets. */
static __always_inline __u32 tr_log2_bucket(__s64 v)
{
	if (v < 0)
		return 0;
	if (v == 0)
		return 1;
	return 2 + tr_log2_floor((__u64)v);
}

/* quantiles (quantile_bucket_of): values below 128 exactly, then 64
 * sub-buckets per power of two; negative values count as 0. */
static __always_inline __u32 tr_quantile_bucket(__s64 v)
{
	__u32 shift;
	__u64 mant;

	if (v < 128)
		return v < 0 ? 0 : (__u32)v;
	shift = tr_log2_floor((__u64)v) - 6;
	mant = (__u64)v >> shift;
	return 128 + (shift - 1) * 64 + (__u32)(mant - 64);
}

/* lhist (linear_bucket_of): 0 below min, inner + 1 at or above max, else
 * 1 + (v - min) / step. */
static __always_inline __u32 tr_linear_bucket(__s64 v, __s64 min, __s64 max,
					      __u64 step, __u32 inner)
{
	if (v < min)
		return 0;
	if (v >= max)
		return inner + 1;
	return 1 + (__u32)(((__u64)v - (__u64)min) / step);
}

#endif /* TRACER_BUCKETS_H */
