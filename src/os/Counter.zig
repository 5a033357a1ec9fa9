//! A statistics counter with one writer at a time, read by any thread: what `weft.Metrics`
//! is made of.
//!
//! The writer adds with a relaxed load and a relaxed store, no locked instruction (a locked
//! add costs about 6 ns here, a tenth of a fiber ping-pong round); a reader sees some recent
//! value, never a torn one. "One writer at a time" means the writes are ordered by something
//! else: the counter belongs to one thread (an executor's), or every write happens under the
//! same lock. A counter that several threads add to without such an order is `Shared`.
//!
//! `-Dmetrics=false` compiles every counter out (`enabled`): an add is then nothing and a read
//! is zero, which is how the cost of counting is measured (docs/BENCHMARKS.md).
const Counter = @This();

const std = @import("std");
const build_options = @import("build_options");

pub const enabled = build_options.metrics;

value: std.atomic.Value(u64) = .init(0),

pub inline fn add(counter: *Counter, amount: u64) void {
    if (!enabled) return;
    counter.value.store(counter.value.load(.monotonic) +% amount, .monotonic);
}

pub inline fn increment(counter: *Counter) void {
    counter.add(1);
}

/// Sets the value: for gauges with one writer (a peak, a time).
pub inline fn set(counter: *Counter, value: u64) void {
    if (!enabled) return;
    counter.value.store(value, .monotonic);
}

pub inline fn read(counter: *const Counter) u64 {
    if (!enabled) return 0;
    return counter.value.load(.monotonic);
}

/// A counter that any thread may add to at any time: one locked add per call. For events
/// that are rare next to the fast paths (a steal, a wake-up from another thread).
pub const Shared = struct {
    value: std.atomic.Value(u64) = .init(0),

    pub inline fn add(counter: *Shared, amount: u64) void {
        if (!enabled) return;
        _ = counter.value.fetchAdd(amount, .monotonic);
    }

    pub inline fn increment(counter: *Shared) void {
        counter.add(1);
    }

    pub inline fn read(counter: *const Shared) u64 {
        if (!enabled) return 0;
        return counter.value.load(.monotonic);
    }
};

test "Counter: adds, sets and reads; compiled out, reads zero" {
    var counter: Counter = .{};
    counter.increment();
    counter.add(41);
    try std.testing.expectEqual(@as(u64, if (enabled) 42 else 0), counter.read());
    counter.set(7);
    try std.testing.expectEqual(@as(u64, if (enabled) 7 else 0), counter.read());
    var shared: Shared = .{};
    shared.add(3);
    try std.testing.expectEqual(@as(u64, if (enabled) 3 else 0), shared.read());
}
