//! The OS calls of weft's portable parts (the lanes, the sync primitives' thread fallbacks,
//! weft.Sim), whatever the OS: on Linux exactly os/linux.zig's, elsewhere the same behaviour
//! through `std.Io.Threaded`'s process-wide instance, which implements futexes, clocks and
//! sleeps on every OS std supports (ulock on macOS, umtx on FreeBSD, WaitOnAddress on
//! Windows).
//!
//! Nothing here is on a hot path off Linux that is not on one in std.Io.Threaded itself: a
//! lane worker parks and wakes through these futexes as a Threaded task would.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const linux = @import("linux.zig");

const is_linux = builtin.os.tag == .linux;

/// Blocks the calling OS thread while `ptr.* == expected`, up to `timeout_ns` (null: forever).
/// Returns on a wake, a timeout, a signal or a value mismatch alike: callers recheck.
pub const futexWait = if (is_linux) linux.futexWait else portable.futexWait;
/// `futexWait` on the bare word.
pub const futexWaitWord = if (is_linux) linux.futexWaitWord else portable.futexWaitWord;
/// Wakes up to `waiters_max` threads blocked in `futexWait` on `ptr`.
pub const futexWake = if (is_linux) linux.futexWake else portable.futexWake;
/// `futexWake` on the bare word.
pub const futexWakeWord = if (is_linux) linux.futexWakeWord else portable.futexWakeWord;
/// A monotonic clock in nanoseconds (CLOCK_MONOTONIC on Linux): weft's timers' clock.
pub const monotonicNs = if (is_linux) linux.monotonicNs else portable.monotonicNs;
/// Gives the calling thread's CPU to another runnable thread, if any.
pub const yieldThread = if (is_linux) linux.yieldThread else portable.yieldThread;
/// The value of environment variable `name` copied into `buffer`; null when unset or longer.
pub const getEnv = if (is_linux) linux.getEnv else portable.getEnv;

/// Whether environment variable `name` is set to "1": a flag a build step sets for its
/// tests (WEFT_QEMU, WEFT_WINE).
pub fn envFlag(name: []const u8) bool {
    var buffer: [8]u8 = undefined;
    const value = getEnv(name, &buffer) orelse return false;
    return std.mem.eql(u8, value, "1");
}

/// Raises the calling thread's nice value by `increment`; false where it cannot (see
/// `thread_tuning_supported`).
pub const lowerThreadPriority = if (is_linux) linux.lowerThreadPriority else portable.refuse;
/// Gives the calling thread time slices of `slice_ns`; false where it cannot.
pub const setThreadSlice = if (is_linux) linux.setThreadSlice else portable.refuseSlice;
/// The custom slices Linux accepts (`setThreadSlice`); 0 elsewhere, where none is.
pub const thread_slice_ns_min: u64 = if (is_linux) linux.thread_slice_ns_min else 0;
pub const thread_slice_ns_max: u64 = if (is_linux) linux.thread_slice_ns_max else 0;

/// Mapping errors: `SystemResources` when the OS refuses memory or another mapping.
pub const MapError = error{ SystemResources, Unexpected };
/// Maps `len` bytes (a multiple of the page size) of private memory, committed as touched.
pub const mapAnonymous = if (is_linux) linux.mapAnonymous else portable.mapAnonymous;
/// Unmaps what `mapAnonymous` mapped (or a whole part of it).
pub const unmap = if (is_linux) linux.unmap else portable.unmap;
/// Makes `page` inaccessible: a guard page.
pub const protectNone = if (is_linux) linux.protectNone else portable.protectNone;
/// Gives `memory`'s pages back to the OS, their contents lost: at once on Linux (the next
/// touch maps a zeroed page), when it needs them on Windows.
pub const adviseDontNeed = if (is_linux) linux.adviseDontNeed else portable.adviseDontNeed;
/// Keeps transparent huge pages out of `memory` where the OS has them (Linux); advice only.
pub const adviseNoHugePages = if (is_linux) linux.adviseNoHugePages else portable.noAdvice;

/// Copies this process's memory at `address` without faulting (a parked fiber's stack, for
/// its trace); `error.Unsupported` off Linux, where traces of parked fibers are left out.
/// (Windows' NtReadVirtualMemory would do, but Wine's reads through a PAGE_NOACCESS page,
/// so nothing here could test it; and Windows x64's frames cannot be walked anyway.)
pub const readOwnMemory = if (is_linux) linux.readOwnMemory else portable.readOwnMemory;

/// The process's fd limits after `raiseFdLimit`.
pub const FdLimit = struct { soft: u64, hard: u64 };
/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns both (see linux.zig); on
/// Windows, which has no such limit, both are `maxInt(u64)`.
pub const raiseFdLimit = if (is_linux) linux.raiseFdLimit else portable.raiseFdLimit;

/// For a test that cannot check what it names here: prints `skipped: <test> (<file>:<line>):
/// <reason>` to stderr, which the build runner shows and CI lists, and returns the error that
/// makes the runner count the test as skipped rather than passed.
pub fn skipTest(src: std.builtin.SourceLocation, reason: []const u8) error{SkipZigTest} {
    std.debug.print("skipped: {s} ({s}:{d}): {s}\n", .{ src.fn_name, src.file, src.line, reason });
    return error.SkipZigTest;
}

/// Whether a thread's OS priority and time slice can be set per thread (lanes' `nice` and
/// `slice_ns`): Linux keeps both per thread; elsewhere a lane that asks for either fails
/// `init` with `error.InvalidOptions` rather than silently running at the default.
pub const thread_tuning_supported = is_linux;

const portable = struct {
    /// The process-wide `std.Io.Threaded` whose futex, clock and sleep work on any thread.
    fn io() Io {
        return Io.Threaded.global_single_threaded.io();
    }

    fn futexWait(ptr: *const std.atomic.Value(u32), expected: u32, timeout_ns: ?u64) void {
        portable.futexWaitWord(&ptr.raw, expected, timeout_ns);
    }

    fn futexWaitWord(word: *const u32, expected: u32, timeout_ns: ?u64) void {
        const timeout: Io.Timeout = if (timeout_ns) |ns|
            .{ .duration = .{ .raw = .fromNanoseconds(ns), .clock = .awake } }
        else
            .none;
        // Canceled only on a thread that runs a Threaded task with a pending cancel: a wake
        // like any other here, and callers recheck.
        io().futexWaitTimeout(u32, word, expected, timeout) catch {};
    }

    fn futexWake(ptr: *const std.atomic.Value(u32), waiters_max: u32) void {
        portable.futexWakeWord(&ptr.raw, waiters_max);
    }

    fn futexWakeWord(word: *const u32, waiters_max: u32) void {
        io().futexWake(u32, word, waiters_max);
    }

    fn monotonicNs() u64 {
        const now = Io.Clock.awake.now(io());
        return @intCast(now.toNanoseconds());
    }

    const page_size = std.heap.page_size_min;

    fn mapAnonymous(len: usize) MapError![*]align(page_size) u8 {
        std.debug.assert(len > 0 and len % page_size == 0);
        if (builtin.os.tag == .windows) return windows_memory.map(len);
        const memory = std.posix.mmap(
            null,
            len,
            .{ .READ = true, .WRITE = true },
            .{ .TYPE = .PRIVATE, .ANONYMOUS = true },
            -1,
            0,
        ) catch |err| return switch (err) {
            error.OutOfMemory, error.LockedMemoryLimitExceeded => error.SystemResources,
            else => error.Unexpected,
        };
        return memory.ptr;
    }

    fn unmap(memory: []align(page_size) u8) void {
        if (builtin.os.tag == .windows) return windows_memory.release(memory);
        std.posix.munmap(memory);
    }

    fn protectNone(page: []align(page_size) u8) MapError!void {
        if (builtin.os.tag == .windows) return windows_memory.protectNone(page);
        if (std.c.mprotect(page.ptr, page.len, .{}) == 0) return;
        return switch (std.posix.errno(-1)) {
            .NOMEM, .AGAIN => error.SystemResources,
            else => error.Unexpected,
        };
    }

    fn adviseDontNeed(memory: []align(page_size) u8) void {
        if (builtin.os.tag == .windows) return windows_memory.reset(memory);
        // Advice: where the OS declines, the pages stay resident, as after a failed trim.
        std.posix.madvise(memory.ptr, memory.len, std.posix.MADV.DONTNEED) catch {};
    }

    /// Windows' virtual memory, through ntdll as std's page allocator calls it. Committed at
    /// once, reserve and commit together: Windows charges the commit against its limit (RAM
    /// and page file) at once, but backs a page only when it is touched, as Linux does.
    const windows_memory = struct {
        const windows = std.os.windows;

        fn map(len: usize) MapError![*]align(page_size) u8 {
            var base: ?*anyopaque = null;
            var size: windows.SIZE_T = len;
            const status = windows.ntdll.NtAllocateVirtualMemory(
                windows.GetCurrentProcess(),
                @ptrCast(&base),
                0,
                &size,
                .{ .COMMIT = true, .RESERVE = true },
                .{ .READWRITE = true },
            );
            return switch (status) {
                .SUCCESS => @ptrCast(@alignCast(base.?)),
                .NO_MEMORY, .COMMITMENT_LIMIT => error.SystemResources,
                else => error.Unexpected,
            };
        }

        /// Releases the whole allocation that begins at `memory` (Windows frees no part of
        /// one: the stack pools unmap whole slabs only).
        fn release(memory: []align(page_size) u8) void {
            var base: ?*anyopaque = memory.ptr;
            var size: windows.SIZE_T = 0;
            _ = windows.ntdll.NtFreeVirtualMemory(
                windows.GetCurrentProcess(),
                @ptrCast(&base),
                &size,
                .{ .RELEASE = true },
            );
        }

        fn protectNone(page: []align(page_size) u8) MapError!void {
            var base: ?*anyopaque = page.ptr;
            var size: windows.SIZE_T = page.len;
            var old: windows.PAGE = undefined;
            const status = windows.ntdll.NtProtectVirtualMemory(
                windows.GetCurrentProcess(),
                &base,
                &size,
                .{ .NOACCESS = true },
                &old,
            );
            return switch (status) {
                .SUCCESS => {},
                .NO_MEMORY, .COMMITMENT_LIMIT => error.SystemResources,
                else => error.Unexpected,
            };
        }

        /// `MEM_RESET`: the pages' contents may go, and Windows takes the pages back when it
        /// needs them rather than at once (a decommit would be at once, but the commit after
        /// it can fail, leaving a stack that faults when touched). Advice: a refusal keeps them.
        fn reset(memory: []align(page_size) u8) void {
            var base: ?*anyopaque = memory.ptr;
            var size: windows.SIZE_T = memory.len;
            _ = windows.ntdll.NtAllocateVirtualMemory(
                windows.GetCurrentProcess(),
                @ptrCast(&base),
                0,
                &size,
                .{ .RESET = true },
                .{ .READWRITE = true },
            );
        }
    };

    fn noAdvice(memory: []align(page_size) u8) void {
        _ = memory;
    }

    fn readOwnMemory(address: usize, buffer: []u8) error{ Unsupported, Unexpected }!usize {
        _ = address;
        _ = buffer;
        return error.Unsupported;
    }

    fn raiseFdLimit() FdLimit {
        if (builtin.os.tag == .windows) {
            return .{ .soft = std.math.maxInt(u64), .hard = std.math.maxInt(u64) };
        }
        var limit = std.posix.getrlimit(.NOFILE) catch return .{ .soft = 0, .hard = 0 };
        if (limit.cur < limit.max) {
            // macOS refuses an unlimited soft limit (EINVAL): the limits then stay.
            if (std.posix.setrlimit(.NOFILE, .{ .cur = limit.max, .max = limit.max })) |_| {
                limit.cur = limit.max;
            } else |_| {}
        }
        // FreeBSD's rlim_t is signed (its infinity is maxInt(i64)); no limit is negative.
        return .{
            .soft = std.math.cast(u64, limit.cur) orelse 0,
            .hard = std.math.cast(u64, limit.max) orelse 0,
        };
    }

    fn refuse(increment: u8) bool {
        _ = increment;
        return false;
    }

    fn refuseSlice(slice_ns: u64) bool {
        _ = slice_ns;
        return false;
    }

    fn yieldThread() void {
        std.Thread.yield() catch {};
    }

    /// POSIX: from the environment `start.zig` recorded for std.debug (null in a program
    /// without a Zig `main`). Windows: the process's own block. Names are weft's own (ASCII).
    fn getEnv(name: []const u8, buffer: []u8) ?[]const u8 {
        if (builtin.os.tag == .windows) {
            var name_utf16: [64:0]u16 = undefined;
            if (name.len > name_utf16.len) return null;
            for (name, 0..) |byte, index| name_utf16[index] = byte;
            name_utf16[name.len] = 0;
            const environ: std.process.Environ = .{ .block = .global };
            const value = environ.getWindows(&name_utf16) orelse return null;
            const len = std.unicode.calcWtf8Len(value);
            if (len > buffer.len) return null;
            return buffer[0..std.unicode.wtf16LeToWtf8(buffer, value)];
        }
        const recorded = std.Options.debug_threaded_io orelse return null;
        const value = recorded.environ.process_environ.getPosix(name) orelse return null;
        if (value.len > buffer.len) return null;
        @memcpy(buffer[0..value.len], value);
        return buffer[0..value.len];
    }
};

test "host: readOwnMemory copies what is readable and stops at an inaccessible page" {
    const page_size = std.heap.page_size_min;
    const memory = (try mapAnonymous(2 * page_size))[0 .. 2 * page_size];
    defer unmap(memory);
    @memset(memory[0..page_size], 0x5a);
    try protectNone(@alignCast(memory[page_size..]));
    var buffer: [2 * 4096]u8 = undefined;
    const copied = readOwnMemory(@intFromPtr(memory.ptr), buffer[0..]) catch |err| switch (err) {
        error.Unsupported => return skipTest(@src(), "this OS reads no memory without a fault"),
        error.Unexpected => return err,
    };
    // Everything before the inaccessible page, nothing of it (pieces are 4 KiB; pages at
    // least that).
    try std.testing.expectEqual(@min(page_size, buffer.len), copied);
    for (buffer[0..copied]) |byte| try std.testing.expectEqual(@as(u8, 0x5a), byte);
}
