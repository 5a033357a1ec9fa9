//! Threads weft starts with a stack of a chosen size (executors, lane workers): the size asked
//! of the thread library is the work's stack plus what the C library takes from it.
//!
//! glibc carves a thread's static TLS block (every thread-local of the program and of the
//! libraries loaded at start, plus a surplus) out of the stack it is given, and refuses a
//! stack the block does not fit with EINVAL, which std's `Thread.spawn` treats as a bug
//! (`unreachable`). std's own `signal_stack_size` option alone puts a 256 KiB thread-local in
//! every program, so a 256 KiB executor stack failed in every program that linked libc. The
//! block's size is read at run time from the loaded modules' PT_TLS segments; without libc
//! (Zig maps TLS beside the stack) and with musl (which adds the TLS to the mapping itself) the
//! addition only reserves address space that is never touched.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;

const log = std.log.scoped(.weft);

/// Beyond the modules' TLS segments: glibc's static surplus (for TLS of libraries opened
/// later, 1664 bytes plus `glibc.rtld.optional_static_tls`, 512 by default), its thread
/// descriptor (about 2.3 KiB) and its minimum usable stack (16 KiB), with room to spare:
/// address space, committed only if touched.
const libc_margin_bytes = 64 * 1024;

/// Static TLS bytes found; 0 until first computed.
var static_tls_bytes_cached: std.atomic.Value(usize) = .init(0);

/// The stack size to ask for so that `work_bytes` of it remain for the thread's own frames.
pub fn stackBytes(work_bytes: usize) usize {
    if (!builtin.link_libc) return work_bytes;
    const page = std.heap.pageSize();
    return std.mem.alignForward(usize, work_bytes + staticTlsBytes() + libc_margin_bytes, page);
}

/// The size of the TLS blocks of every module loaded now (the executable and the libraries it
/// was linked with): what glibc reserves in each thread's stack, but its surplus.
pub fn staticTlsBytes() usize {
    const cached = static_tls_bytes_cached.load(.monotonic);
    if (cached != 0) return cached - 1;
    var total_bytes: usize = 0;
    // A one-member error set: std's libc path cannot cast to an empty one.
    std.posix.dl_iterate_phdr(&total_bytes, error{Never}, addModuleTls) catch unreachable;
    // Stored plus one so that a program with no TLS at all is cached too; a race stores the
    // same value twice.
    static_tls_bytes_cached.store(total_bytes + 1, .monotonic);
    return total_bytes;
}

fn addModuleTls(
    info: *std.posix.dl_phdr_info,
    size: usize,
    total_bytes: *usize,
) error{Never}!void {
    _ = size;
    for (info.phdr[0..info.phnum]) |phdr| {
        if (phdr.type != .TLS) continue;
        const alignment = @max(phdr.@"align", 1);
        total_bytes.* = std.mem.alignForward(usize, total_bytes.*, alignment) + phdr.memsz;
    }
}

pub const SpawnError = std.Thread.SpawnError;

/// `std.Thread.spawn` with a stack of `work_stack_bytes` for the thread's own frames (see
/// `stackBytes`). A failure is logged with the sizes involved, for the user to act on.
pub fn spawn(
    what: []const u8,
    work_stack_bytes: usize,
    /// What std's `Thread.spawn` allocates its bookkeeping with (null: its default).
    gpa: ?std.mem.Allocator,
    comptime function: anytype,
    args: anytype,
) SpawnError!std.Thread {
    assert(work_stack_bytes > 0);
    const stack_bytes = stackBytes(work_stack_bytes);
    assert(stack_bytes >= work_stack_bytes);
    return std.Thread.spawn(.{ .stack_size = stack_bytes, .allocator = gpa }, function, args) catch |err|
        {
            log.err("cannot start {s} thread: {t} (stack {d} bytes: {d} for its work, {d} of " ++
                "static TLS; raise ulimit -u or free memory)", .{
                what, err, stack_bytes, work_stack_bytes, staticTlsBytes(),
            });
            return err;
        };
}

test "thread: a small work stack is enough in any program, libc or not" {
    // 16 KiB of work: glibc's static TLS (std's 256 KiB signal stack among it) comes on top.
    const thread = try spawn("test", 16 * 1024, std.testing.allocator, struct {
        fn run() void {
            var frame: [8 * 1024]u8 = undefined;
            std.mem.doNotOptimizeAway(&frame);
        }
    }.run, .{});
    thread.join();
    if (builtin.link_libc) {
        try std.testing.expect(staticTlsBytes() > 0);
        try std.testing.expect(stackBytes(16 * 1024) > 16 * 1024 + staticTlsBytes());
    }
}
