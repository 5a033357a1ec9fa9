//! The synchronous fast path of file I/O: a call the kernel can answer from its caches without
//! waiting runs on the calling executor as one plain syscall; only a call that would wait goes
//! to the loop (io_uring) or the blocking lane (epoll).
//!
//! Why: for data already in memory a syscall is the floor (about 0.5 µs for a 4 KiB `pread`
//! here), and every other route costs more than the work: io_uring adds a submission, a
//! completion and a fiber switch, epoll a refused `epoll_ctl` (a regular file cannot be polled)
//! and a hand-off to a lane thread and back. Measured by bench/files.zig (docs/BENCHMARKS.md):
//! a hot random 4 KiB read cost 2.3-3.7 µs on io_uring and 4.9-14 µs on epoll, against 1-2 µs
//! on std.Io.Threaded. The kernel's own flags say when it can answer at once:
//!
//! - `read`: `preadv2(RWF_NOWAIT)` returns the bytes when the first page is cached and
//!   `EAGAIN` when it is not. Only positional reads try it. Streaming reads keep their path: a
//!   pipe, socket or terminal waits for readiness on the loop, where a canceled read is
//!   canceled in the kernel; trying them first would add a syscall to every read of an idle
//!   pipe. A partly cached range comes back short (the cached part); the caller's next read
//!   takes the slow path for the rest, as std's readers loop on short reads anyway.
//!
//! Not fast-pathed, measured and rejected: buffered writes. `pwritev2(RWF_NOWAIT)` of a
//! buffered file is refused (`EOPNOTSUPP`) by ext4 and tmpfs on this machine's 6.18 kernel
//! (XFS and btrfs accept it), so every write would pay one more syscall for nothing.
//!
//! Refusals: `EOPNOTSUPP` means this file does not take the flag (tmpfs refuses even reads, and
//! kernels before 4.14 refuse it everywhere): that call takes the slow path and the next one
//! tries again, as another file may be on a file system that accepts it. `ENOSYS` (no
//! `preadv2`, before 4.6) is remembered for the life of the process.
//!
//! Cancelation and errors: the fast path never blocks, so it is no cancelation point of its
//! own; callers check for a pending cancel before it, as before the loop operation. Every
//! other errno is the kernel's answer to the same call the slow path would make (`EISDIR`,
//! `EBADF`, `ESPIPE` on a pipe, ...) and is returned as that path would return it.
//!
//! Known limit: a file opened `O_DIRECT` (std.Io never does) is read synchronously even with
//! `RWF_NOWAIT`, which only promises not to wait for locks or memory: such a read would hold
//! its executor for the device's latency.
const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;
const posix = std.posix;
const assert = std.debug.assert;
const os = @import("../os/linux.zig");

/// Whether the kernel has the call at all; `refused` is final.
const Support = enum(u8) { unknown, refused };

/// Written once (`refused`), read by every executor: monotonic is enough, a stale read costs
/// one more attempt that the kernel refuses again.
var read_support: std.atomic.Value(Support) = .init(.unknown);

/// Tests only: when non-zero, every attempt fails with this errno instead of calling the
/// kernel, as on a kernel or file system that refuses the flag.
pub var refusal_for_testing: std.atomic.Value(u16) = .init(0);

/// Tests only: attempts the kernel answered (`fast`) and calls sent to the slow path (`slow`).
pub var fast_for_testing: std.atomic.Value(u64) = .init(0);
pub var slow_for_testing: std.atomic.Value(u64) = .init(0);

/// Reads at `offset` with `preadv2(RWF_NOWAIT)`. Returns the kernel's answer (a byte count, 0
/// at end of file, or `-errno`), or null when the caller must take the slow path: the data is
/// not cached, or the flag is refused. Never blocks.
pub fn read(fd: posix.fd_t, iovecs: []const posix.iovec, offset: u64) ?i32 {
    assert(iovecs.len > 0);
    // -1 would mean "at the file position", and other negative offsets are the slow path's
    // to refuse.
    if (offset > std.math.maxInt(i64)) return slow();
    if (read_support.load(.monotonic) == .refused) return slow();
    const rc = if (injected()) |rc| rc else linux.preadv2(
        fd,
        iovecs.ptr,
        iovecs.len,
        @intCast(offset),
        linux.RWF.NOWAIT,
    );
    return switch (os.errno(rc)) {
        .SUCCESS => fast(rc),
        // Not cached (or a lock is held): the asynchronous path waits for it.
        .AGAIN => slow(),
        // This file does not take the flag; another may.
        .OPNOTSUPP => slow(),
        .NOSYS => {
            read_support.store(.refused, .monotonic);
            return slow();
        },
        // Interrupted, or an argument only the real call should judge (an `O_DIRECT`
        // alignment): the slow path makes that call and reports what it gets.
        .INTR, .INVAL => slow(),
        else => |e| answer(e),
    };
}

fn fast(rc: usize) i32 {
    // A count of at most 0x7ffff000 bytes: Linux caps a single read there.
    assert(rc <= std.math.maxInt(i32));
    if (builtin.is_test) _ = fast_for_testing.fetchAdd(1, .monotonic);
    return @intCast(rc);
}

fn answer(e: os.E) i32 {
    assert(e != .SUCCESS);
    if (builtin.is_test) _ = fast_for_testing.fetchAdd(1, .monotonic);
    return -@as(i32, @intFromEnum(e));
}

fn slow() ?i32 {
    if (builtin.is_test) _ = slow_for_testing.fetchAdd(1, .monotonic);
    return null;
}

/// The raw result of a refused call, when a test simulates one.
fn injected() ?usize {
    if (!builtin.is_test) return null;
    const errno_value = refusal_for_testing.load(.monotonic);
    if (errno_value == 0) return null;
    return @bitCast(-@as(isize, errno_value));
}

/// Tests only: forgets a remembered refusal.
pub fn resetForTesting() void {
    comptime assert(builtin.is_test);
    read_support.store(.unknown, .monotonic);
    refusal_for_testing.store(0, .monotonic);
}
