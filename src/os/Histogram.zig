//! A histogram of durations in fixed log2 buckets, with the sum: what `weft.Metrics` keeps of
//! a lane's queue wait and run time (and any duration worth a distribution), cheap enough to
//! record on every job and read from any thread.
//!
//! Bucket 0 counts durations of 0 or 1 ns, bucket i (1 to `bounded_buckets - 1`) those in
//! (2^(i-1), 2^i] ns, and the last bucket (`overflow_bucket`) those over 2^36 ns (about 69 s).
//! Upper bounds are inclusive so that each bucket is exactly a Prometheus `le` bucket, and a
//! percentile read as "the upper bound of its bucket" is a true bound: p99 <= 2^i ns. The
//! bounds are powers of two, not decimal steps (1, 2.5, 5, 10 ...): the bucket is one `clz`
//! away from the duration, with no table to search, and any duration from a nanosecond to a
//! minute has a bucket at most twice as wide as the duration itself.
//!
//! Recording is one bucket increment and one add to the sum, through `Counter`s: a relaxed
//! load and store (one writer at a time, as `Counter`) for `Histogram`, a locked add for
//! `Histogram.Shared` (any thread at any time). No count is kept apart from the buckets: a
//! snapshot sums them, so its count always equals its buckets' total (a separate count, read
//! at another instant than the buckets, could disagree with them, which Prometheus rejects).
//! `-Dmetrics=false` compiles the recording out; a snapshot is then all zeros.
const Histogram = @This();

const std = @import("std");
const assert = std.debug.assert;
const Counter = @import("Counter.zig");

pub const enabled = Counter.enabled;

/// Buckets with a finite upper bound: 2^0 to 2^36 ns.
pub const bounded_buckets = 37;
/// The bucket of every duration over `bound_ns_max`.
pub const overflow_bucket = bounded_buckets;
pub const buckets_count = bounded_buckets + 1;
/// The upper bound of the last bounded bucket: 2^36 ns, about 69 s.
pub const bound_ns_max: u64 = 1 << (bounded_buckets - 1);

buckets: [buckets_count]Counter = @splat(.{}),
sum_ns: Counter = .{},

/// Counts one duration. One writer at a time (see the file doc).
pub inline fn record(histogram: *Histogram, duration_ns: u64) void {
    if (!enabled) return;
    histogram.buckets[bucketOf(duration_ns)].increment();
    histogram.sum_ns.add(duration_ns);
}

/// What has been recorded so far: each bucket and the sum read with a relaxed load (each
/// recent, not one instant). Any thread.
pub fn snapshot(histogram: *const Histogram) Snapshot {
    var result: Snapshot = .{};
    for (&result.buckets, &histogram.buckets) |*out, *bucket| out.* = bucket.read();
    result.sum_ns = histogram.sum_ns.read();
    result.count = result.total();
    return result;
}

/// A histogram that any thread may record into at any time: a locked add per bucket and one
/// for the sum. For durations that several threads measure without a common lock.
pub const Shared = struct {
    buckets: [buckets_count]Counter.Shared = @splat(.{}),
    sum_ns: Counter.Shared = .{},

    pub inline fn record(histogram: *Shared, duration_ns: u64) void {
        if (!enabled) return;
        histogram.buckets[bucketOf(duration_ns)].increment();
        histogram.sum_ns.add(duration_ns);
    }

    pub fn snapshot(histogram: *const Shared) Snapshot {
        var result: Snapshot = .{};
        for (&result.buckets, &histogram.buckets) |*out, *bucket| out.* = bucket.read();
        result.sum_ns = histogram.sum_ns.read();
        result.count = result.total();
        return result;
    }
};

/// The bucket `duration_ns` is counted in: the smallest i with duration <= 2^i, at most
/// `overflow_bucket`.
pub fn bucketOf(duration_ns: u64) usize {
    if (duration_ns <= 1) return 0;
    // ceil(log2(d)) for d >= 2: the bit length of d - 1.
    const bits: usize = 64 - @as(usize, @clz(duration_ns - 1));
    const bucket = @min(bits, overflow_bucket);
    assert(bucket == overflow_bucket or duration_ns <= boundNs(bucket));
    assert(bucket == 0 or duration_ns > boundNs(bucket - 1));
    return bucket;
}

/// The inclusive upper bound of a bounded bucket: 2^bucket ns.
pub fn boundNs(bucket: usize) u64 {
    assert(bucket < bounded_buckets);
    return @as(u64, 1) << @intCast(bucket);
}

/// Plain numbers, summable (the shards of a `Lane.Sharded` are reported as one lane).
pub const Snapshot = struct {
    buckets: [buckets_count]u64 = @splat(0),
    sum_ns: u64 = 0,
    /// The durations counted: the buckets' total.
    count: u64 = 0,

    fn total(snap: *const Snapshot) u64 {
        var sum: u64 = 0;
        for (snap.buckets) |bucket| sum += bucket;
        return sum;
    }

    pub fn add(snap: *Snapshot, other: Snapshot) void {
        for (&snap.buckets, other.buckets) |*bucket, more| bucket.* += more;
        snap.sum_ns +%= other.sum_ns;
        snap.count += other.count;
        assert(snap.count == snap.total());
    }

    /// The upper bound of the bucket that holds the `percent` percentile (0 < percent <= 100),
    /// the smallest duration that at least that share of the durations are at or under (to the
    /// bucket's resolution): `percentileNs(99)` is the p99. `std.math.maxInt(u64)` when it
    /// falls in the overflow bucket; null when nothing was counted.
    pub fn percentileNs(snap: *const Snapshot, percent: f64) ?u64 {
        assert(percent > 0 and percent <= 100);
        if (snap.count == 0) return null;
        const count: f64 = @floatFromInt(snap.count);
        // The rank of the percentile among the durations in order, from 1.
        const rank: u64 = @intFromFloat(@max(1, @ceil(count * percent / 100)));
        assert(rank <= snap.count);
        var cumulative: u64 = 0;
        for (snap.buckets, 0..) |bucket, index| {
            cumulative += bucket;
            if (cumulative < rank) continue;
            if (index == overflow_bucket) return std.math.maxInt(u64);
            return boundNs(index);
        }
        unreachable; // the buckets add up to `count`
    }
};

comptime {
    assert(bound_ns_max == boundNs(bounded_buckets - 1));
    assert(buckets_count == overflow_bucket + 1);
}

test "Histogram: durations land in the bucket whose power of two bounds them" {
    const cases = [_]struct { ns: u64, bucket: usize }{
        .{ .ns = 0, .bucket = 0 },
        .{ .ns = 1, .bucket = 0 },
        .{ .ns = 2, .bucket = 1 },
        .{ .ns = 3, .bucket = 2 },
        .{ .ns = 4, .bucket = 2 },
        .{ .ns = 5, .bucket = 3 },
        .{ .ns = 1000, .bucket = 10 }, // (512, 1024]
        .{ .ns = 1024, .bucket = 10 },
        .{ .ns = 1025, .bucket = 11 },
        .{ .ns = std.time.ns_per_ms, .bucket = 20 }, // (524288, 1048576]
        .{ .ns = std.time.ns_per_s, .bucket = 30 }, // (2^29, 2^30]
        .{ .ns = bound_ns_max, .bucket = 36 },
        .{ .ns = bound_ns_max + 1, .bucket = overflow_bucket },
        .{ .ns = std.math.maxInt(u64), .bucket = overflow_bucket },
    };
    for (cases) |case| try std.testing.expectEqual(case.bucket, bucketOf(case.ns));

    var histogram: Histogram = .{};
    for (cases) |case| histogram.record(case.ns);
    const snap = histogram.snapshot();
    if (!enabled) {
        try std.testing.expectEqual(@as(u64, 0), snap.count);
        try std.testing.expectEqual(@as(?u64, null), snap.percentileNs(50));
        return;
    }
    try std.testing.expectEqual(@as(u64, cases.len), snap.count);
    var expected: [buckets_count]u64 = @splat(0);
    for (cases) |case| expected[case.bucket] += 1;
    try std.testing.expectEqualSlices(u64, &expected, &snap.buckets);
    var sum_ns: u64 = 0;
    for (cases) |case| sum_ns +%= case.ns;
    try std.testing.expectEqual(sum_ns, snap.sum_ns);
}

test "Histogram: p50 and p99 are the upper bounds of the buckets that hold them" {
    var histogram: Histogram = .{};
    try std.testing.expectEqual(@as(?u64, null), histogram.snapshot().percentileNs(99));
    // 98 fast, 2 slow: the p99 (the 99th of 100 in order) is a slow one.
    for (0..98) |_| histogram.record(100); // (64, 128]
    for (0..2) |_| histogram.record(3 * std.time.ns_per_ms); // (2^21, 2^22]
    const snap = histogram.snapshot();
    if (!enabled) return;
    try std.testing.expectEqual(@as(?u64, 128), snap.percentileNs(50));
    try std.testing.expectEqual(@as(?u64, 128), snap.percentileNs(98));
    try std.testing.expectEqual(@as(?u64, 1 << 22), snap.percentileNs(99));
    try std.testing.expectEqual(@as(?u64, 1 << 22), snap.percentileNs(100));
    // The smallest percentile is the first duration's bucket.
    try std.testing.expectEqual(@as(?u64, 128), snap.percentileNs(0.001));
    histogram.record(bound_ns_max + 1);
    try std.testing.expectEqual(std.math.maxInt(u64), histogram.snapshot().percentileNs(100).?);
}

test "Histogram: snapshots add up bucket by bucket" {
    var a: Histogram = .{};
    var b: Histogram = .{};
    a.record(10);
    b.record(10);
    b.record(5000);
    var total = a.snapshot();
    total.add(b.snapshot());
    if (!enabled) return;
    try std.testing.expectEqual(@as(u64, 3), total.count);
    try std.testing.expectEqual(@as(u64, 2), total.buckets[bucketOf(10)]);
    try std.testing.expectEqual(@as(u64, 1), total.buckets[bucketOf(5000)]);
    try std.testing.expectEqual(@as(u64, 5020), total.sum_ns);
}

test "Histogram.Shared: four threads recording at once lose no duration" {
    const per_thread = 10_000;
    var histogram: Shared = .{};
    const Recorder = struct {
        fn main(shared: *Shared, duration_ns: u64) void {
            for (0..per_thread) |_| shared.record(duration_ns);
        }
    };
    var threads: [4]std.Thread = undefined;
    for (&threads, 0..) |*thread, index| {
        thread.* = try std.Thread.spawn(.{}, Recorder.main, .{ &histogram, 1000 * (index + 1) });
    }
    for (threads) |thread| thread.join();
    const snap = histogram.snapshot();
    if (!enabled) return;
    try std.testing.expectEqual(@as(u64, 4 * per_thread), snap.count);
    // 1000 and 2000 ns share no bucket, nor do 3000 and 4000: (2048, 4096] holds both.
    try std.testing.expectEqual(@as(u64, per_thread), snap.buckets[bucketOf(1000)]);
    try std.testing.expectEqual(@as(u64, per_thread), snap.buckets[bucketOf(2000)]);
    try std.testing.expectEqual(@as(u64, 2 * per_thread), snap.buckets[bucketOf(3000)]);
    try std.testing.expectEqual(@as(u64, per_thread * 10_000), snap.sum_ns);
}
