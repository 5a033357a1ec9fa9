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
//! - `open`: `openat2(RESOLVE_CACHED)` resolves the path only from the dentry cache, and fails
//!   with `EAGAIN` where a component would have to be read from the disk (or revalidated). An
//!   `O_PATH` open is then made at once. Any other open could still wait in the file's own
//!   `open` (a FIFO waits for its peer, a device for its carrier, a FUSE file or directory and
//!   an NFSv4 file for their server), so the target's type and mount are asked first through an
//!   `O_PATH` descriptor (which runs no `open`), and only a regular file or a directory on a
//!   local mount (as for `stat` below) is opened here: a second path walk, a `statx` and a
//!   `close`. Everything else goes to io_uring's workers (never its inline attempt, which opens
//!   a FIFO as `O_NONBLOCK` and waits for a FUSE or NFS server on the executor's thread: see
//!   `loop/backend/io_uring.zig`) or to the blocking lane.
//!   Rejected: opening a directory at once without the probe (a FUSE directory's open waits
//!   for its daemon); opening with `O_NONBLOCK` and clearing it afterwards, because a FIFO
//!   opened without waiting has already woken its peer's open, which neither closing it nor
//!   keeping it undoes. Opens that create or truncate (`O_CREAT`, `O_TRUNC`, `O_TMPFILE`)
//!   write to the disk and never try (RESOLVE_CACHED refuses them anyway). A path swapped for
//!   a FIFO between the type check and the open blocks this executor in that open, as the same
//!   call blocks a std.Io.Threaded thread; its result is still the one the call asked for.
//!
//! - `stat`: `statx` of an open descriptor, with `AT_STATX_DONT_SYNC` and the mount id, is kept
//!   where the mount's file system answers from memory (`mounts.zig`: ext4, xfs, btrfs, tmpfs,
//!   ...); elsewhere (NFS, FUSE, ...) the slow path makes the plain call, so its answer is
//!   exact. A stat by path opens the path first as above, as `O_PATH` (never a file's `open`),
//!   stats that descriptor and closes it. Both would otherwise go to io_uring's worker threads
//!   (`STATX` never completes inline) or the blocking lane: a walk that stats every entry, or an
//!   open that asks whether it opened a directory, paid a thread hop per call.
//!
//! Not fast-pathed, measured and rejected: buffered writes. `pwritev2(RWF_NOWAIT)` of a
//! buffered file is refused (`EOPNOTSUPP`) by ext4 and tmpfs on this machine's 6.18 kernel
//! (XFS and btrfs accept it), so every write would pay one more syscall for nothing.
//!
//! Refusals of `openat2`: `ENOSYS` (before 5.6), or `EINVAL` from a kernel that does not know
//! `RESOLVE_CACHED` (before 5.12). `EINVAL` can also be the call's own answer, so it is
//! confirmed once with an open that is valid everywhere (`/` as `O_PATH`) before it is
//! remembered; until then, and for every other refusal, the call takes the slow path.
//!
//! Refusals of `RWF_NOWAIT`: `EOPNOTSUPP` means this file does not take the flag (tmpfs refuses
//! even reads, and kernels before 4.14 refuse it everywhere): that call takes the slow path and the
//! next one tries again, as another file may be on a file system that accepts it. `ENOSYS` (no
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
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const posix = std.posix;
const assert = std.debug.assert;
const os = @import("../os/linux.zig");
const mounts = @import("mounts.zig");

/// Whether the kernel has the call at all; `refused` is final.
const Support = enum(u8) { unknown, refused };

/// Written once (`refused`), read by every executor: monotonic is enough, a stale read costs
/// one more attempt that the kernel refuses again.
var read_support: std.atomic.Value(Support) = .init(.unknown);

/// `openat2` with `RESOLVE_CACHED`, as `read_support`.
var open_support: std.atomic.Value(Support) = .init(.unknown);

/// `statx` with the mount id (Linux 5.8), as `read_support`.
var stat_support: std.atomic.Value(Support) = .init(.unknown);

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

/// The flags an `O_PATH` open keeps (the kernel's `O_PATH_FLAGS`): `openat` drops the others,
/// `openat2` refuses them.
fn pathFlags(flags: linux.O) linux.O {
    return .{
        .ACCMODE = .RDONLY,
        .PATH = true,
        .DIRECTORY = flags.DIRECTORY,
        .NOFOLLOW = flags.NOFOLLOW,
        .CLOEXEC = flags.CLOEXEC,
    };
}

/// Opens `path` relative to `dir_fd` if every component is in the dentry cache and the open
/// cannot wait (see the file doc). Returns the new descriptor or `-errno` (the kernel's
/// answer: a cached `ENOENT`, `EACCES`, ...), or null when the caller must take the slow path.
/// Never blocks, except as the file doc says.
pub fn open(dir_fd: posix.fd_t, path: [*:0]const u8, flags: linux.O) ?i32 {
    if (flags.CREAT or flags.TRUNC or flags.TMPFILE) return slow();
    if (open_support.load(.monotonic) == .refused) return slow();
    const result = openUncounted(dir_fd, path, flags) orelse return slow();
    if (builtin.is_test) _ = fast_for_testing.fetchAdd(1, .monotonic);
    return result;
}

fn openUncounted(dir_fd: posix.fd_t, path: [*:0]const u8, flags: linux.O) ?i32 {
    if (flags.PATH) return openCached(dir_fd, path, pathFlags(flags));
    // The type check's `statx` must not wait either (see `mounts.zig`); a file's type never
    // changes, so `DONT_SYNC`'s cached answer is exact.
    if (!mounts.probeAllowed()) return null;
    const probe = openCached(dir_fd, path, pathFlags(flags)) orelse return null;
    if (probe < 0) return probe; // the lookup's answer: the real open would fail alike
    var statx: linux.Statx = undefined;
    const type_flags = linux.AT.EMPTY_PATH | linux.AT.STATX_DONT_SYNC;
    const rc = linux.statx(probe, "", type_flags, .{ .TYPE = true, .MNT_ID = true }, &statx);
    // Closed before the open: with one descriptor left, the open must get it (EMFILE is
    // otherwise an answer the plain open would not give), and the same number as on Threaded.
    os.closeFd(probe);
    if (os.errno(rc) != .SUCCESS or !statx.mask.TYPE) return null;
    // `O_DIRECTORY` made the probe fail unless it found a directory (as the open would).
    const wanted: u32 = if (flags.DIRECTORY) linux.S.IFDIR else linux.S.IFREG;
    if (statx.mode & linux.S.IFMT != wanted) return null;
    // A file's or directory's `open` waits for a server on FUSE (FUSE_OPEN, FUSE_OPENDIR) and
    // a file's on NFSv4 (OPEN), whose names RESOLVE_CACHED finds in the dentry cache all the
    // same: only local mounts.
    if (!statx.mask.MNT_ID or mounts.kindOf(statx.mnt_id) != .local) return null;
    return openCached(dir_fd, path, flags);
}

/// `statx` of an open descriptor (`AT_EMPTY_PATH`), answered from memory where the file's
/// mount allows it (see the file doc). Returns the kernel's answer (0; `statx` is filled), or
/// null when the caller must take the slow path. Never blocks.
pub fn statFd(fd: posix.fd_t, mask: linux.STATX, statx: *linux.Statx) ?i32 {
    if (stat_support.load(.monotonic) == .refused or !mounts.probeAllowed()) return slow();
    const kept = statLocal(fd, mask, statx) orelse return slow();
    if (builtin.is_test) _ = fast_for_testing.fetchAdd(1, .monotonic);
    return kept;
}

/// `statx` of `path` relative to `dir_fd`, where every component is in the dentry cache and
/// the mount allows it: an `O_PATH` open with `RESOLVE_CACHED` (which runs no file's `open`),
/// `statx` of that descriptor, and its `close`. `follow`: whether a final symbolic link is
/// followed. Returns 0 (`statx` is filled) or `-errno` for a lookup's answer (`ENOENT`,
/// `ENOTDIR`, `EACCES`, `ELOOP`: what `statx` would answer), or null for the slow path.
pub fn statPath(
    dir_fd: posix.fd_t,
    path: [*:0]const u8,
    follow: bool,
    mask: linux.STATX,
    statx: *linux.Statx,
) ?i32 {
    if (stat_support.load(.monotonic) == .refused) return slow();
    if (open_support.load(.monotonic) == .refused or !mounts.probeAllowed()) return slow();
    const flags: linux.O = .{ .PATH = true, .CLOEXEC = true, .NOFOLLOW = !follow };
    const probe = openCached(dir_fd, path, flags) orelse return slow();
    if (probe < 0) return switch (@as(os.E, @enumFromInt(-probe))) {
        .NOENT, .NOTDIR, .ACCES, .LOOP => |e| answer(e),
        // Out of descriptors (`statx` needs none), or anything only the real call should
        // judge.
        else => slow(),
    };
    defer os.closeFd(probe);
    const kept = statLocal(probe, mask, statx) orelse return slow();
    if (builtin.is_test) _ = fast_for_testing.fetchAdd(1, .monotonic);
    return kept;
}

/// The probe: `statx` with `DONT_SYNC` and the mount id; 0 when the mount is `local`, else
/// null. Counts nothing.
fn statLocal(fd: posix.fd_t, mask: linux.STATX, statx: *linux.Statx) ?i32 {
    var mask_and_mount = mask;
    mask_and_mount.MNT_ID = true;
    statx.* = std.mem.zeroes(linux.Statx);
    const flags = linux.AT.EMPTY_PATH | linux.AT.STATX_DONT_SYNC;
    const rc = if (injected()) |rc| rc else linux.statx(fd, "", flags, mask_and_mount, statx);
    switch (os.errno(rc)) {
        .SUCCESS => {},
        .NOSYS => {
            stat_support.store(.refused, .monotonic);
            return null;
        },
        else => return null,
    }
    if (!statx.mask.MNT_ID) {
        // Before Linux 5.8: the mount, and so whether to keep the answer, is unknown.
        stat_support.store(.refused, .monotonic);
        return null;
    }
    if (mounts.kindOf(statx.mnt_id) != .local) return null;
    return 0;
}

/// One `openat2(RESOLVE_CACHED)`: the descriptor, `-errno` (the kernel's answer), or null
/// (the slow path's to make). Counts nothing.
fn openCached(dir_fd: posix.fd_t, path: [*:0]const u8, flags: linux.O) ?i32 {
    const how: OpenHow = .{
        .flags = @as(u32, @bitCast(flags)),
        .mode = 0,
        .resolve = resolve_cached,
    };
    const rc = if (injected()) |rc| rc else openat2(dir_fd, path, &how);
    return switch (os.errno(rc)) {
        .SUCCESS => @intCast(rc), // a descriptor
        // A component is not cached (or needs revalidation), or a lease is held: slow path.
        .AGAIN => null,
        .INTR => null,
        .NOSYS, .OPNOTSUPP => {
            open_support.store(.refused, .monotonic);
            return null;
        },
        .INVAL => {
            if (!cachedOpenWorks()) open_support.store(.refused, .monotonic);
            return null;
        },
        else => |e| -@as(i32, @intFromEnum(e)),
    };
}

/// `struct open_how` of `openat2(2)`.
const OpenHow = extern struct { flags: u64, mode: u64, resolve: u64 };
const resolve_cached: u64 = 0x20;

fn openat2(dir_fd: posix.fd_t, path: [*:0]const u8, how: *const OpenHow) usize {
    const dir: usize = @bitCast(@as(isize, dir_fd));
    return linux.syscall4(.openat2, dir, @intFromPtr(path), @intFromPtr(how), @sizeOf(OpenHow));
}

/// Whether `openat2(RESOLVE_CACHED)` works at all: an `O_PATH` open of `/` is valid on every
/// kernel that has the flag, and the root is always cached.
fn cachedOpenWorks() bool {
    const how: OpenHow = .{
        .flags = @as(u32, @bitCast(linux.O{ .PATH = true, .CLOEXEC = true })),
        .mode = 0,
        .resolve = resolve_cached,
    };
    const rc = if (injected()) |rc| rc else openat2(linux.AT.FDCWD, "/", &how);
    if (os.errno(rc) != .SUCCESS) return os.errno(rc) == .AGAIN;
    os.closeFd(@intCast(rc));
    return true;
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
    open_support.store(.unknown, .monotonic);
    stat_support.store(.unknown, .monotonic);
    mounts.resetForTesting();
    refusal_for_testing.store(0, .monotonic);
}
