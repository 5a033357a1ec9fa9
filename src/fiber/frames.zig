//! The return addresses of code that is not running now: a parked fiber (from the registers
//! its last switch saved) or a thread interrupted by a signal (from the registers the kernel
//! saved), read by following the frame-pointer chain.
//!
//! Each frame record is two words, the caller's frame pointer and the return address, at the
//! frame pointer (x86_64, aarch64) or just below it (riscv64). The walk stops at a frame pointer
//! of 0, which is where every fiber's `start` (fiber/context.zig) and a thread's `_start` end
//! the chain.
//!
//! A parked fiber may be resumed by its executor while another thread walks its stack, and its
//! stack may even end and be reused: the walk then reads frames that change under it. So the
//! stack is copied with `os.readOwnMemory` (`process_vm_readv` on our own process), which
//! reports an unmapped or guard page instead of faulting, into the caller's window (a page
//! holds most of a parked task's frames: one syscall per task or two), and the chain must
//! climb: each frame pointer above the last, 16-byte aligned (the three ABIs align every frame
//! to 16), within `climb_bytes_max` of the first. A walk that raced with a resume yields a
//! wrong trace, never a crash. Rejected: loading the records directly within the stack's
//! bounds, which are safe to read (slabs stay mapped until the runtime ends) but are not known
//! for the main task, whose stack is its thread's, and which a racing reader cannot read from
//! `Task.stack` atomically.
//!
//! Builds that omit frame pointers (ReleaseFast and ReleaseSmall, by Zig's default) have no
//! chain to follow: `available` is false there, and the walk returns the first address alone.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const os = @import("../os/host.zig");
const context = @import("context.zig");
const symbols = @import("../os/symbols.zig");

/// Whether this build keeps frame pointers on a target whose chain `walk` knows. Not Windows
/// x64's: there a function may set its frame pointer anywhere in its frame (the unwind data
/// says where), so the saved pointer and the return address are not at fixed places from it.
pub const available = !builtin.omit_frame_pointer and switch (builtin.cpu.arch) {
    .x86_64 => builtin.os.tag != .windows,
    .aarch64, .riscv64 => true,
    else => false,
};

/// Where the two words of a frame record sit, from the frame pointer.
const record_offset: isize = if (builtin.cpu.arch == .riscv64) -16 else 0;

/// How far above the first frame pointer the chain may climb: past any fiber stack weft maps
/// (config.stack_size_bytes_default is 1 MiB) and a thread's 8 MiB default. A chain that climbs
/// further is garbage.
pub const climb_bytes_max = 64 * 1024 * 1024;

/// Why a walk stopped.
pub const End = enum {
    /// A frame pointer of 0: the outermost frame was reached.
    complete,
    /// `out` is full; the chain went on.
    truncated,
    /// The chain left the rules above (not climbing, misaligned, too far): the stack changed
    /// under the walk, or code without frame pointers is on it.
    garbled,
    /// A record sits on an unmapped or guard page.
    unreadable,
    /// `process_vm_readv` is missing or forbidden (see `os.readOwnMemory`), or this build has
    /// no frame pointers (`available`): only the first address is known.
    unsupported,
};

pub const Trace = struct {
    /// Innermost first, as `std.debug.StackTrace.return_addresses`: each one is a return
    /// address (the first, the saved program counter, is given as one more than it, as std
    /// does, so that every entry can be printed as `address - 1`).
    addresses: []usize,
    end: End,
};

/// The trace of a fiber parked by `context.switchTo`, from the registers saved in `saved`. Its
/// first address is where the fiber will resume (inside the switch), then its callers. The
/// registers are read with relaxed atomic loads: the fiber may be resumed meanwhile (see the
/// top of the file), and is never written to. `window` holds the stack memory copied (see
/// `walk`).
pub fn parked(saved: *const context.Context, out: []usize, window: []align(16) u8) Trace {
    const registers = &saved.registers;
    const pc: usize, const fp: usize = switch (builtin.cpu.arch) {
        .x86_64 => .{
            @atomicLoad(u64, &registers.rip, .monotonic),
            @atomicLoad(u64, &registers.rbp, .monotonic),
        },
        .aarch64, .riscv64 => .{
            @atomicLoad(u64, &registers.pc, .monotonic),
            @atomicLoad(u64, &registers.fp, .monotonic),
        },
        else => @compileError("weft fibers support x86_64, aarch64 and riscv64"),
    };
    return walk(pc, fp, out, window);
}

/// The trace from a program counter and a frame pointer (a signal's saved context, or a
/// parked fiber's registers): `pc` first, then the return address of every frame record
/// from `fp` outwards. The stack is copied into `window` (at least one record, 16 bytes; a
/// page saves syscalls) from each record that lies outside the copy upwards. Async-signal-safe:
/// syscalls only, no lock, no allocation.
pub fn walk(pc: usize, fp_first: usize, out: []usize, window: []align(16) u8) Trace {
    assert(window.len >= 16);
    if (out.len == 0) return .{ .addresses = out, .end = .truncated };
    out[0] = pc +| 1;
    if (!available) return .{ .addresses = out[0..1], .end = .unsupported };
    var copy: Copy = .{ .window = window };
    var count: usize = 1;
    var fp = fp_first;
    const end: End = while (true) {
        if (fp == 0) break .complete;
        if (fp % 16 != 0 or fp -% fp_first > climb_bytes_max) break .garbled;
        const record_address: usize = @bitCast(@as(isize, @bitCast(fp)) +% record_offset);
        const record = copy.record(record_address) catch |err| switch (err) {
            error.Unsupported => break .unsupported,
            error.Unreadable => break .unreadable,
        };
        const caller_fp, const return_address = record;
        // The outermost record: `start`'s return address slot holds 0 (fiber/context.zig).
        if (return_address == 0) break .complete;
        if (count == out.len) break .truncated;
        out[count] = return_address;
        count += 1;
        if (caller_fp != 0 and caller_fp <= fp) break .garbled;
        fp = caller_fp;
    };
    assert(count >= 1);
    assert(count <= out.len);
    return .{ .addresses = out[0..count], .end = end };
}

/// Writes `trace`, a line a frame with its function and place where known, and why it ended
/// early: task dumps' and weft.Sim's failure reports.
pub fn writeTrace(w: *std.Io.Writer, trace: Trace) std.Io.Writer.Error!void {
    try symbols.writeReturnAddresses(w, trace.addresses);
    switch (trace.end) {
        .complete => {},
        .truncated => try w.writeAll("    (more frames)\n"),
        .garbled, .unreadable => try w.writeAll("    (trace cut: the stack changed while " ++
            "it was read, or holds code without frame pointers)\n"),
        .unsupported => try w.writeAll("    (no stack trace: " ++ unsupported_reason ++ ")\n"),
    }
}

const unsupported_reason = if (available)
    "process_vm_readv is missing or forbidden"
else
    "this build omits frame pointers";

/// The stack memory a walk copied: `window[0..len]` holds what lies at `base`.
const Copy = struct {
    window: []align(16) u8,
    base: usize = 0,
    len: usize = 0,

    /// The two words at `address` (16-byte aligned), copied anew from there when outside.
    fn record(copy: *Copy, address: usize) error{ Unsupported, Unreadable }![2]usize {
        assert(address % 16 == 0);
        const inside = address >= copy.base and copy.len >= 16 and
            address - copy.base <= copy.len - 16;
        if (!inside) {
            copy.base = address;
            copy.len = os.readOwnMemory(address, copy.window) catch |err| return switch (err) {
                error.Unsupported => error.Unsupported,
                error.Unexpected => error.Unreadable,
            };
            if (copy.len < 16) return error.Unreadable;
        }
        const words: [*]const usize = @ptrCast(@alignCast(copy.window[address - copy.base ..].ptr));
        return words[0..2].*;
    }
};

fn parkHere(fiber: *Pair) callconv(.c) noreturn {
    markedFunction(fiber);
    unreachable; // never resumed
}

/// A function whose return address the test below finds in the parked fiber's trace.
noinline fn markedFunction(fiber: *Pair) void {
    fiber.marker = @returnAddress();
    context.switchTo(&fiber.fiber, &fiber.main);
}

const Pair = struct {
    main: context.Context = .{ .registers = undefined },
    fiber: context.Context = .{ .registers = undefined },
    marker: usize = 0,

    fn run(argument: *anyopaque) callconv(.c) noreturn {
        parkHere(@ptrCast(@alignCast(argument)));
    }
};

test "frames: a parked fiber's trace climbs from its switch to its start" {
    if (!available) return os.skipTest(@src(), "this build omits frame pointers");
    const stack = try std.testing.allocator.alignedAlloc(u8, .@"16", 64 * 1024);
    defer std.testing.allocator.free(stack);
    var pair: Pair = .{};
    const stack_top = @intFromPtr(stack.ptr) + stack.len;
    context.prepare(&pair.fiber, stack, &Pair.run, &pair);
    defer context.finish(stack_top);
    context.switchTo(&pair.main, &pair.fiber);
    var addresses: [32]usize = undefined;
    var window: [4096]u8 align(16) = undefined;
    const trace = parked(&pair.fiber, &addresses, &window);
    if (trace.end == .unsupported) {
        return os.skipTest(@src(), "process_vm_readv is unavailable (qemu-user or seccomp)");
    }
    try std.testing.expectEqual(End.complete, trace.end);
    // The saved program counter, `markedFunction`'s caller (`parkHere`), and on up to `start`.
    try std.testing.expect(trace.addresses.len >= 3);
    try std.testing.expect(std.mem.indexOfScalar(usize, trace.addresses, pair.marker) != null);
}

test "frames: a garbage frame pointer ends the walk without a fault" {
    var addresses: [8]usize = undefined;
    var window: [64]u8 align(16) = undefined;
    // Unmapped (the zero page), misaligned, and a chain that would not climb.
    for ([_]usize{ 4096, 4097, std.math.maxInt(usize) - 15 }) |fp| {
        const trace = walk(0x1234, fp, &addresses, &window);
        try std.testing.expectEqual(@as(usize, 0x1235), trace.addresses[0]);
        if (!available) continue;
        try std.testing.expect(trace.end != .complete);
    }
    var looping: [2]usize align(16) = .{ 0, 0x5678 };
    looping[0] = @intFromPtr(&looping); // a record pointing at itself
    const trace = walk(0x1234, @intFromPtr(&looping), &addresses, &window);
    if (available and trace.end != .unsupported) {
        try std.testing.expectEqual(End.garbled, trace.end);
        try std.testing.expectEqual(@as(usize, 0x5678), trace.addresses[1]);
    }
}
