//! locked_ops: what one locked read-modify-write instruction costs on this machine, the unit in
//! which a fiber hand-off is priced. One thread, one cache line it owns, no contention: the
//! cheapest a locked instruction gets. Reports ns per operation for an atomic fetch-add, a
//! compare-and-swap, a swap (the exchange a lock takes and std's Mutex releases with) and, for
//! scale, a plain increment of the same word.
//!
//! A ping-pong round over two capacity-1 `std.Io.Queue`s executes 20 such instructions in std's
//! own Queue, Mutex and Condition code (counted from lib/std/Io.zig, per round: two puts of 4,
//! two gets of 3 before parking and 3 after) plus weft's futex wait and wake; multiply by this
//! figure for the floor that no runtime under that Queue can go below (docs/BENCHMARKS.md).
//!
//! Usage: bench-locked_ops [--iterations N] (default 100,000,000)
const std = @import("std");
const harness = @import("harness");

const iterations_default = 100_000_000;

pub fn main(init: std.process.Init) !void {
    const arena = init.arena.allocator();
    const args = try harness.argsAlloc(arena, init.minimal.args);
    const iterations = try harness.flagInt(args, "--iterations", iterations_default);
    if (iterations == 0) return error.InvalidIterations;

    var word: std.atomic.Value(u64) = .init(0);
    const fetch_add_ns = measure(iterations, &word, fetchAdd);
    const cmpxchg_ns = measure(iterations, &word, compareAndSwap);
    const swap_ns = measure(iterations, &word, swap);
    const plain_ns = measure(iterations, &word, plainIncrement);

    var buffer: [512]u8 = undefined;
    var stdout = std.Io.File.stdout().writerStreaming(init.io, &buffer);
    try stdout.interface.print(
        "bench=locked_ops iterations={d} status=ok fetch_add_ns={d:.2} cmpxchg_ns={d:.2} " ++
            "swap_ns={d:.2} plain_ns={d:.2} check={d}\n",
        .{ iterations, fetch_add_ns, cmpxchg_ns, swap_ns, plain_ns, word.load(.monotonic) },
    );
    try stdout.interface.flush();
}

fn measure(iterations: u64, word: *std.atomic.Value(u64), comptime operation: fn (*std.atomic.Value(u64)) void) f64 {
    const start_ns = harness.monotonicNs();
    for (0..iterations) |_| operation(word);
    const elapsed_ns = harness.monotonicNs() - start_ns;
    return @as(f64, @floatFromInt(elapsed_ns)) / @as(f64, @floatFromInt(iterations));
}

fn fetchAdd(word: *std.atomic.Value(u64)) void {
    _ = word.fetchAdd(1, .seq_cst);
}

fn compareAndSwap(word: *std.atomic.Value(u64)) void {
    const seen = word.load(.monotonic);
    _ = word.cmpxchgStrong(seen, seen +% 1, .seq_cst, .monotonic);
}

fn swap(word: *std.atomic.Value(u64)) void {
    _ = word.swap(word.raw +% 1, .seq_cst);
}

fn plainIncrement(word: *std.atomic.Value(u64)) void {
    // Volatile, so that the loop is not folded into one addition.
    const pointer: *volatile u64 = &word.raw;
    pointer.* +%= 1;
}
