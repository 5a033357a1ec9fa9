//! The CPU lane in one small program: computation off the executor with `rt.compute`.
//!
//! Four fibers each hash 8 MiB with SHA-256 (tens of milliseconds of pure computation) while
//! a ticker fiber on the same executor wakes every millisecond. With `rt.compute` the hashing
//! runs on the CPU lane's threads, so the ticker stays on time; hashing inline on the fiber
//! instead would hold the executor, and the ticker would be late by a whole hash.
//!
//! Rule of thumb: I/O on the executors, blocking syscalls on a `weft.Lane`, computation on
//! the CPU lane.
//!
//! Usage: ./zigw build examples && zig-out/bin/example-cpu
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const Sha256 = std.crypto.hash.sha2.Sha256;

fn digest(data: []const u8) [Sha256.digest_length]u8 {
    var out: [Sha256.digest_length]u8 = undefined;
    Sha256.hash(data, &out, .{});
    return out;
}

/// `digest`'s result with the CPU lane's errors (`QueueFull`, `Overloaded`, ...) added.
const Digest = weft.CpuLane.Result(digest);

fn hasher(rt: weft.Runtime, io: Io, data: []const u8, out: *Digest) Io.Cancelable!void {
    out.* = rt.compute(io, digest, .{data});
}

/// Wakes every millisecond until `done`, keeping the worst lateness seen.
fn ticker(io: Io, done: *std.atomic.Value(bool), late_max_ns: *i96) Io.Cancelable!void {
    while (!done.load(.acquire)) {
        const due = Io.Clock.awake.now(io).addDuration(.fromMilliseconds(1));
        try io.sleep(.fromMilliseconds(1), .awake);
        const late = Io.Clock.awake.now(io).nanoseconds - due.nanoseconds;
        late_max_ns.* = @max(late_max_ns.*, late);
    }
}

pub fn main(init: std.process.Init) !void {
    var rt = try weft.Runtime.init(init.gpa, .{});
    defer rt.deinit();
    const io = rt.io();

    const data = try init.gpa.alloc(u8, 8 << 20);
    defer init.gpa.free(data);
    for (data, 0..) |*byte, i| byte.* = @truncate(i *% 31);

    var done: std.atomic.Value(bool) = .init(false);
    var late_max_ns: i96 = 0;
    var tick = try io.concurrent(ticker, .{ io, &done, &late_max_ns });
    var digests: [4]Digest = undefined;
    var group: Io.Group = .init;
    for (&digests) |*out| try group.concurrent(io, hasher, .{ rt, io, data, out });
    try group.await(io);
    done.store(true, .release);
    try tick.await(io);

    for (digests) |result| {
        const hash = try result;
        std.debug.print("sha256: {x}\n", .{hash[0..8]});
    }
    std.debug.print("CPU lane threads: {d}; ticker late by at most {d} us\n", .{
        rt.computeThreads(),
        @divTrunc(late_max_ns, std.time.ns_per_us),
    });
}
