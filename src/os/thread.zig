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
    // glibc's carving is Linux's; other C libraries keep TLS apart from the stack.
    if (!builtin.link_libc or builtin.os.tag != .linux) return work_bytes;
    const page = std.heap.pageSize();
    return std.mem.alignForward(usize, work_bytes + staticTlsBytes() + libc_margin_bytes, page);
}

/// The size of the TLS blocks of every module loaded now (the executable and the libraries it
/// was linked with): what glibc reserves in each thread's stack, but its surplus.
pub fn staticTlsBytes() usize {
    if (builtin.os.tag != .linux) return 0; // see `stackBytes`
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

/// What a thread started by `spawn` is, and where its stack starts.
pub const Named = struct {
    /// For the user: "executor", "lane worker".
    what: []const u8,
    /// The option that sizes its stack, named in an overflow's message.
    option: []const u8,
    /// A frame address taken as the thread started: inside its stack's mapping, near the top
    /// (`mappingOf` reads where that mapping lies).
    start_address: usize,
};

/// Set as the thread starts, with no system call (the thread must take no descriptor behind
/// its starter's back: a process at its descriptor limit would see an open fail at random);
/// read by the SIGSEGV handler (a thread-local load: signal-safe).
threadlocal var named: ?Named = null;

/// The calling thread's record, if `spawn` started it (on Linux).
pub fn current() ?Named {
    return named;
}

/// `std.Thread.spawn` with a stack of `work_stack_bytes` for the thread's own frames (see
/// `stackBytes`). A failure is logged with the sizes involved, for the user to act on.
pub fn spawn(
    what: []const u8,
    /// The option that sizes the stack, for an overflow's message.
    option: []const u8,
    work_stack_bytes: usize,
    /// What std's `Thread.spawn` allocates its bookkeeping with (null: its default).
    gpa: ?std.mem.Allocator,
    comptime function: anytype,
    args: anytype,
) SpawnError!std.Thread {
    assert(work_stack_bytes > 0);
    const stack_bytes = stackBytes(work_stack_bytes);
    assert(stack_bytes >= work_stack_bytes);
    const Entry = struct {
        fn run(
            what_: []const u8,
            option_: []const u8,
            args_: @TypeOf(args),
        ) @typeInfo(@TypeOf(function)).@"fn".return_type.? {
            if (builtin.os.tag == .linux) named = .{
                .what = what_,
                .option = option_,
                .start_address = @frameAddress(),
            };
            return @call(.auto, function, args_);
        }
    };
    const config: std.Thread.SpawnConfig = .{ .stack_size = stack_bytes, .allocator = gpa };
    return std.Thread.spawn(config, Entry.run, .{ what, option, args }) catch |err| {
        log.err("cannot start {s} thread: {t} (stack {d} bytes: {d} for its work, {d} of " ++
            "static TLS; raise ulimit -u or free memory)", .{
            what, err, stack_bytes, work_stack_bytes, staticTlsBytes(),
        });
        return err;
    };
}

/// The mapping `address` lies in, [low, high), from /proc/self/maps; null without /proc or
/// a descriptor to read it with. Async-signal-safe (system calls and the caller's stack only):
/// the SIGSEGV handler asks it for the stack of the faulting thread, so a thread start costs
/// no read of the whole map, and no descriptor.
pub fn mappingOf(address: usize) ?[2]usize {
    if (builtin.os.tag != .linux) return null; // no /proc/self/maps
    const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
    const fd_rc = linux.open("/proc/self/maps", .{ .CLOEXEC = true }, 0);
    if (linux.errno(fd_rc) != .SUCCESS) return null;
    const fd: i32 = @intCast(fd_rc);
    defer _ = linux.close(fd);
    var buffer: [4096]u8 = undefined;
    var len: usize = 0;
    // Bounded by the file's length: every pass consumes what it read, or ends.
    while (true) {
        const rc = linux.read(fd, buffer[len..].ptr, buffer.len - len);
        if (linux.errno(rc) != .SUCCESS or rc == 0) return null;
        len += rc;
        var start: usize = 0;
        while (std.mem.indexOfScalarPos(u8, buffer[0..len], start, '\n')) |end| {
            if (parseRange(buffer[start..end])) |range| {
                if (range[0] <= address and address < range[1]) return range;
            }
            start = end + 1;
        }
        // Keep the partial last line; a line longer than the buffer is no mapping's.
        if (start == 0 and len == buffer.len) return null;
        std.mem.copyForwards(u8, buffer[0 .. len - start], buffer[start..len]);
        len -= start;
    }
}

/// "start-end perms ..." -> .{ start, end }.
fn parseRange(line: []const u8) ?[2]usize {
    const dash = std.mem.indexOfScalar(u8, line, '-') orelse return null;
    const space = std.mem.indexOfScalarPos(u8, line, dash, ' ') orelse return null;
    const low = std.fmt.parseInt(usize, line[0..dash], 16) catch return null;
    const high = std.fmt.parseInt(usize, line[dash + 1 .. space], 16) catch return null;
    return .{ low, high };
}

test "thread: a small work stack is enough in any program, libc or not" {
    // 16 KiB of work: glibc's static TLS (std's 256 KiB signal stack among it) comes on top.
    const Seen = struct { record: ?Named, start: ?[2]usize, deep: ?[2]usize };
    var seen: Seen = undefined;
    const thread = try spawn("test", "none", 16 * 1024, std.testing.allocator, struct {
        fn run(out: *Seen) void {
            var frame: [8 * 1024]u8 = undefined;
            std.mem.doNotOptimizeAway(&frame);
            out.record = current();
            out.start = if (out.record) |record| mappingOf(record.start_address) else null;
            out.deep = mappingOf(@intFromPtr(&frame));
        }
    }.run, .{&seen});
    thread.join();
    // Off Linux nothing tells a thread its stack's bounds (no /proc/self/maps): it ran, and an
    // overflow there is reported as a plain fault.
    if (builtin.os.tag != .linux) return std.testing.expectEqual(@as(?Named, null), seen.record);
    // The thread knew where its stack starts; the mapping there holds its deeper frames too,
    // and at least the work size.
    const record = seen.record.?;
    try std.testing.expectEqualStrings("test", record.what);
    const stack = seen.start.?;
    try std.testing.expectEqual(stack, seen.deep.?);
    try std.testing.expect(stack[1] - stack[0] >= 16 * 1024);
    if (builtin.link_libc) {
        try std.testing.expect(staticTlsBytes() > 0);
        try std.testing.expect(stackBytes(16 * 1024) > 16 * 1024 + staticTlsBytes());
    }
}
