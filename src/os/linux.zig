//! The syscalls weft makes, and their errno triage. Knows nothing of tasks or fibers.
//!
//! Each wrapper switches exhaustively over the errno values the call documents: retry on
//! `INTR` where the call is restartable, a named error where the caller can act on it, and
//! `unexpectedErrno` for the rest.
//!
//! The errno policy, for all of weft: an errno that only a bug can cause (a descriptor used
//! after it was closed, a bad pointer, an argument weft itself got wrong) goes to `errnoBug`,
//! with a comment naming the bug; an errno that a correct program may meet but that has no
//! name in the operation's error set goes to `unexpectedErrno`, as does the switch's `else`.
//! Both are `error.Unexpected` in release builds. In Debug builds `errnoBug` panics at the
//! syscall, as std.Io.Threaded does for the same errnos (a program fails the same way on
//! either `Io`), and `unexpectedErrno` logs the errno. Rejected: logging a bug and carrying
//! on, which hides it until the `error.Unexpected` surfaces far from its cause. A call that
//! cannot fail but for a bug and has no error to return (a futex on weft's own word) uses a
//! commented `unreachable`; code that runs in a forked child (os/spawn.zig) calls neither
//! helper, since it must not panic or log.
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const assert = std.debug.assert;

pub const fd_t = linux.fd_t;
pub const E = linux.E;
pub const errno = linux.errno;

/// fork(2), in the raw syscall's convention (a pid, 0 in the child, or an errno for
/// `errno`), through libc's `fork` when libc is linked: a child forked by the raw syscall
/// keeps libc's view of its parent, and musl caches each thread's id in its thread
/// descriptor, so such a child's `abort` (any panic) would send SIGABRT to its parent's
/// thread instead of itself. libc's `fork` also runs its atfork handlers (malloc's locks).
/// Without libc, the raw syscall. Rejected: the raw call with a re-read of the tid, which
/// libc offers no way to set.
pub fn fork() usize {
    if (!builtin.link_libc) return linux.fork();
    const rc = std.c.fork();
    if (rc >= 0) return @intCast(rc);
    const e = std.posix.errno(rc);
    return @bitCast(-@as(isize, @intFromEnum(e)));
}

pub const UnexpectedError = error{Unexpected};

/// std.Io.Threaded's: a panic in Debug builds, `error.Unexpected` otherwise (see the policy
/// above).
pub const errnoBug = std.Io.Threaded.errnoBug;

pub fn unexpectedErrno(err: E) UnexpectedError {
    if (builtin.mode == .Debug) {
        std.log.scoped(.weft).err("unexpected errno: {t}", .{err});
    }
    return error.Unexpected;
}

pub const MapError = error{
    /// The kernel refused a new mapping: out of memory, or the process reached
    /// `vm.max_map_count` mappings.
    SystemResources,
} || UnexpectedError;

/// Maps `len` bytes of private anonymous memory, committed lazily page by page and without
/// reserving swap for all of it (fiber stacks are mostly never touched).
pub fn mapAnonymous(len: usize) MapError![*]align(std.heap.page_size_min) u8 {
    assert(len > 0);
    assert(len % std.heap.page_size_min == 0);
    var flags: linux.MAP = .{ .TYPE = .PRIVATE, .ANONYMOUS = true };
    // std's flag struct lacks NORESERVE on some architectures (riscv64); the kernel's
    // overcommit heuristic then decides, which only matters for huge stack pools.
    if (@hasField(linux.MAP, "NORESERVE")) flags.NORESERVE = true;
    const rc = mmapAnonymous(len, flags);
    return switch (errno(rc)) {
        .SUCCESS => @ptrFromInt(rc),
        .NOMEM, .AGAIN => error.SystemResources,
        // Flags and a length of weft's own: none of these can apply to an anonymous mapping.
        .INVAL, .BADF, .ACCES, .PERM, .NODEV, .OVERFLOW, .TXTBSY => |e| errnoBug(e),
        else => |e| unexpectedErrno(e),
    };
}

/// Keeps transparent huge pages out of `memory` (fiber stacks touch one page in 64). Best
/// effort: a kernel without THP rejects the advice, which is then moot.
pub fn adviseNoHugePages(memory: []align(std.heap.page_size_min) u8) void {
    _ = linux.madvise(memory.ptr, memory.len, linux.MADV.NOHUGEPAGE);
}

/// Gives `memory`'s pages back to the kernel now (`MADV_DONTNEED`): the resident set shrinks at
/// once and the next touch of a page maps a zeroed one. `MADV_FREE` was rejected: it leaves the
/// pages resident (and counted in RSS) until the kernel is short of memory, which a container's
/// limit or an operator watching RSS never sees. Guard markers stay (Linux keeps them across
/// zaps); callers leave guard pages out anyway, for the `mprotect` fallback's sake.
pub fn adviseDontNeed(memory: []align(std.heap.page_size_min) u8) void {
    const rc = linux.madvise(memory.ptr, memory.len, linux.MADV.DONTNEED);
    switch (errno(rc)) {
        .SUCCESS => {},
        // Locked or huge-TLB pages, which weft's anonymous stacks are not: the pages stay.
        .INVAL => {},
        else => |e| unexpectedErrno(e) catch {}, // logged in Debug; the pages stay
    }
}

pub const IoVec = std.posix.iovec_const;

/// `MADV_GUARD_INSTALL` (Linux 6.13 uapi).
pub const madv_guard_install = 102;
/// `PIDFD_SELF` (Linux 6.15 uapi): the calling process, without opening a pidfd.
const pidfd_self: linux.fd_t = -10000;

/// Installs guard markers on every range of `ranges` with one `process_madvise` call.
/// `error.Unsupported`: this kernel cannot (no `PIDFD_SELF`, or guards not allowed through
/// `process_madvise`); the caller installs them one `madvise` at a time.
pub fn adviseGuardBatch(ranges: []const IoVec) error{ Unsupported, SystemResources }!void {
    // The kernel may stop early (it returns the bytes advised); go on from where it stopped.
    var done: usize = 0;
    while (done < ranges.len) {
        const rc = linux.syscall5(
            .process_madvise,
            @bitCast(@as(isize, pidfd_self)),
            @intFromPtr(ranges[done..].ptr),
            ranges.len - done,
            madv_guard_install,
            0,
        );
        switch (errno(rc)) {
            .SUCCESS => {},
            .INVAL, .BADF, .NOSYS, .PERM, .SRCH, .OPNOTSUPP => {
                // Nothing advised yet: the caller falls back cleanly. Part advised: installing
                // a guard twice is harmless, so the fallback may redo the whole slab.
                return error.Unsupported;
            },
            .NOMEM, .AGAIN => return error.SystemResources,
            else => return error.Unsupported,
        }
        if (rc == 0) return error.Unsupported; // no progress: do not loop on it
        var advised_bytes: usize = rc;
        while (done < ranges.len and advised_bytes >= ranges[done].len) {
            advised_bytes -= ranges[done].len;
            done += 1;
        }
        assert(advised_bytes == 0); // guard ranges are whole pages, advised whole
    }
}

/// Makes `page` inaccessible (`PROT_NONE`): a guard page where `MADV_GUARD_INSTALL` is not
/// available. Costs a mapping of its own (the region splits in two).
pub fn protectNone(page: []align(std.heap.page_size_min) u8) MapError!void {
    const rc = linux.mprotect(page.ptr, page.len, .{});
    switch (errno(rc)) {
        .SUCCESS => {},
        .NOMEM, .AGAIN => return error.SystemResources,
        else => |e| return unexpectedErrno(e),
    }
}

pub fn unmap(memory: []align(std.heap.page_size_min) u8) void {
    const rc = if (builtin.sanitize_thread)
        libcResult(std.c.munmap(memory.ptr, memory.len))
    else
        linux.munmap(memory.ptr, memory.len);
    switch (errno(rc)) {
        .SUCCESS => {},
        // munmap only fails for a range we never mapped: a bug in the caller.
        .INVAL => unreachable,
        else => {},
    }
}

/// Counts the bytes of mappings resident in memory, for the fiber stacks' committed bytes.
/// With `/proc/self/pagemap` and its `PAGEMAP_SCAN` ioctl (Linux 6.7) the kernel walks the
/// page tables and returns runs of present pages, skipping page tables never populated: about
/// 0.5 us per 1 MiB stack with its top page touched (`bench/stacks_committed.zig`).
/// Without it (older kernels, no /proc, qemu-user) it falls back to `mincore`, six times
/// slower. Either holds the mapping lock one range at a time. Pages swapped out are not
/// counted: the scan reports guard markers as swap entries, which would count every guard.
pub const Residency = struct {
    /// `/proc/self/pagemap`; null once the scan is refused, so every range takes `mincore`.
    pagemap: ?fd_t,

    /// `PAGEMAP_SCAN`'s argument (`struct pm_scan_arg`, uapi linux/fs.h).
    const ScanArg = extern struct {
        size: u64,
        flags: u64,
        start: u64,
        end: u64,
        walk_end: u64,
        vec: u64,
        vec_len: u64,
        max_pages: u64,
        category_inverted: u64,
        category_mask: u64,
        category_anyof_mask: u64,
        return_mask: u64,
    };
    /// `struct page_region`: the pages from `start` to `end` share the returned categories.
    const Region = extern struct { start: u64, end: u64, categories: u64 };
    const pagemap_scan = linux.IOCTL.IOWR('f', 16, ScanArg);
    const page_is_present: u64 = 1 << 3;
    /// Runs returned per call; a 1 MiB stack is one or two runs, so a slab of 256 stacks
    /// takes a handful of calls.
    const regions_max = 128;
    /// Pages asked of `mincore` per call: its answer is a byte per page.
    const mincore_pages_max = 4096;

    pub fn open() Residency {
        return .{ .pagemap = openSampled("/proc/self/pagemap") };
    }

    /// Counts with `mincore` only, as where the scan is refused; for tests of that fallback.
    pub fn withoutScan() Residency {
        return .{ .pagemap = null };
    }

    pub fn close(residency: *Residency) void {
        if (residency.pagemap) |fd| closeFd(fd);
        residency.* = undefined;
    }

    /// Bytes of `memory` (whole pages of one mapping) that are committed.
    pub fn bytes(residency: *Residency, memory: []align(std.heap.page_size_min) const u8) u64 {
        assert(memory.len % std.heap.page_size_min == 0);
        if (residency.pagemap) |fd| {
            if (scanBytes(fd, memory)) |committed| return committed else |_| {
                closeFd(fd);
                residency.pagemap = null;
            }
        }
        return mincoreBytes(memory);
    }

    fn scanBytes(fd: fd_t, memory: []const u8) error{Unsupported}!u64 {
        var regions: [regions_max]Region = undefined;
        const end: u64 = @intFromPtr(memory.ptr) + memory.len;
        var start: u64 = @intFromPtr(memory.ptr);
        var committed: u64 = 0;
        while (start < end) {
            var arg: ScanArg = .{
                .size = @sizeOf(ScanArg),
                .flags = 0,
                .start = start,
                .end = end,
                .walk_end = 0,
                .vec = @intFromPtr(&regions),
                .vec_len = regions.len,
                .max_pages = 0,
                .category_inverted = 0,
                .category_mask = 0,
                .category_anyof_mask = page_is_present,
                .return_mask = page_is_present,
            };
            const rc = linux.ioctl(fd, pagemap_scan, @intFromPtr(&arg));
            switch (errno(rc)) {
                .SUCCESS => {},
                .INTR => continue,
                // ENOTTY before 6.7; anything else refuses the scan as well: count again
                // from the start with mincore rather than trust a partial count.
                else => return error.Unsupported,
            }
            assert(rc <= regions.len);
            for (regions[0..rc]) |region| committed += region.end - region.start;
            if (arg.walk_end <= start) return error.Unsupported; // no progress: do not loop
            start = arg.walk_end;
        }
        return committed;
    }

    fn mincoreBytes(memory: []align(std.heap.page_size_min) const u8) u64 {
        const page_size = std.heap.page_size_min;
        var vector: [mincore_pages_max]u8 = undefined;
        var committed: u64 = 0;
        var offset: usize = 0;
        while (offset < memory.len) {
            const len = @min(memory.len - offset, mincore_pages_max * page_size);
            const rc = linux.mincore(@constCast(memory[offset..].ptr), len, &vector);
            // ENOMEM: part of the range is not mapped; EAGAIN: the kernel is short of memory.
            // A count is an observation; the pages it cannot see count as not committed.
            if (errno(rc) == .SUCCESS) {
                for (vector[0 .. len / page_size]) |page| committed += page & 1;
            }
            offset += len;
        }
        return committed * page_size;
    }
};

/// Under ThreadSanitizer, memory is mapped and unmapped through libc, whose calls TSan
/// intercepts to reset its shadow of the range; after a raw syscall the shadow would keep the
/// history of whatever used those addresses before (a heap block TSan's allocator unmapped,
/// say), reported as a race with the first writes of a fiber on the new stack.
fn mmapAnonymous(len: usize, flags: linux.MAP) usize {
    const prot: linux.PROT = .{ .READ = true, .WRITE = true };
    if (!builtin.sanitize_thread) return linux.mmap(null, len, prot, flags, -1, 0);
    const result = std.c.mmap(null, len, prot, flags, -1, 0);
    if (result == std.c.MAP_FAILED) return libcResult(-1);
    return @intFromPtr(result);
}

/// A libc call's result in the raw syscall's convention (-errno on failure), for `errno`.
fn libcResult(rc: c_int) usize {
    if (rc != -1) return @intCast(rc);
    const code: isize = @intFromEnum(std.c.errno(rc));
    return @bitCast(-code);
}

/// Reads `/proc/sys/vm/max_map_count`, or returns null when it cannot be read.
pub fn maxMapCount() ?u64 {
    var buffer: [32]u8 = undefined;
    const text = readFile("/proc/sys/vm/max_map_count", &buffer) orelse return null;
    return std.fmt.parseInt(u64, std.mem.trim(u8, text, " \n"), 10) catch null;
}

pub fn closeFd(fd: fd_t) void {
    // close is not retried on EINTR on Linux: the descriptor is released either way.
    _ = linux.close(fd);
}

pub const EventFdError = error{ ProcessFdQuotaExceeded, SystemFdQuotaExceeded, SystemResources } ||
    UnexpectedError;

pub fn eventFd() EventFdError!fd_t {
    const rc = linux.eventfd(0, linux.EFD.CLOEXEC | linux.EFD.NONBLOCK);
    return switch (errno(rc)) {
        .SUCCESS => @intCast(rc),
        .MFILE => error.ProcessFdQuotaExceeded,
        .NFILE => error.SystemFdQuotaExceeded,
        .NOMEM, .NODEV => error.SystemResources,
        else => |e| unexpectedErrno(e),
    };
}

/// Adds one to an eventfd counter. Never blocks: the counter saturating (EAGAIN) means a
/// wake-up is already pending, which is all a waker wants.
pub fn eventFdSignal(fd: fd_t) void {
    const one: u64 = 1;
    while (true) {
        const rc = linux.write(fd, std.mem.asBytes(&one), @sizeOf(u64));
        switch (errno(rc)) {
            .SUCCESS, .AGAIN => return,
            .INTR => continue,
            else => return,
        }
    }
}

/// Resets an eventfd counter to zero; returns whether it was signalled.
pub fn eventFdDrain(fd: fd_t) bool {
    var value: u64 = 0;
    while (true) {
        const rc = linux.read(fd, std.mem.asBytes(&value), @sizeOf(u64));
        switch (errno(rc)) {
            .SUCCESS => return true,
            .AGAIN => return false,
            .INTR => continue,
            else => return false,
        }
    }
}

/// Blocks the calling OS thread while `ptr.* == expected`, up to `timeout_ns` (null: forever).
/// Returns on a wake, a timeout, a signal or a value mismatch alike: callers recheck.
pub fn futexWait(ptr: *const std.atomic.Value(u32), expected: u32, timeout_ns: ?u64) void {
    futexWaitWord(&ptr.raw, expected, timeout_ns);
}

/// `futexWait` on the bare word (os/atomic.zig's look-alike of `Value` in tests has one too).
pub fn futexWaitWord(word: *const u32, expected: u32, timeout_ns: ?u64) void {
    var ts: linux.timespec = undefined;
    if (timeout_ns) |ns| ts = timespecFromNs(ns);
    const rc = linux.futex_4arg(
        word,
        .{ .cmd = .WAIT, .private = true },
        expected,
        if (timeout_ns != null) &ts else null,
    );
    switch (errno(rc)) {
        .SUCCESS, .AGAIN, .INTR, .TIMEDOUT => {},
        // A bad address or invalid timeout is a bug in weft.
        .FAULT, .INVAL => unreachable,
        else => {},
    }
}

pub fn futexWake(ptr: *const std.atomic.Value(u32), waiters_max: u32) void {
    futexWakeWord(&ptr.raw, waiters_max);
}

/// `futexWake` on the bare word (see `futexWaitWord`).
pub fn futexWakeWord(word: *const u32, waiters_max: u32) void {
    // The kernel reads the count as a signed int: maxInt(u32) would be -1 and wake only one.
    const count: u32 = @min(waiters_max, std.math.maxInt(i32));
    const rc = linux.futex_3arg(word, .{ .cmd = .WAKE, .private = true }, count);
    switch (errno(rc)) {
        .SUCCESS => {},
        .FAULT, .INVAL => unreachable,
        else => {},
    }
}

pub fn timespecFromNs(ns: u64) linux.timespec {
    return .{
        .sec = @intCast(ns / std.time.ns_per_s),
        .nsec = @intCast(ns % std.time.ns_per_s),
    };
}

/// Nanoseconds on `clock`, or null when the kernel does not have that clock.
pub fn clockNs(clock: linux.clockid_t) ?u64 {
    var ts: linux.timespec = undefined;
    return switch (errno(linux.clock_gettime(clock, &ts))) {
        .SUCCESS => @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec)),
        else => null,
    };
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of every timer inside weft.
pub fn monotonicNs() u64 {
    return clockNs(.MONOTONIC) orelse unreachable; // CLOCK_MONOTONIC always exists on Linux.
}

/// CLOCK_MONOTONIC_COARSE in nanoseconds: CLOCK_MONOTONIC as of the last timer tick (1-4 ms
/// behind), for a timestamp too frequent to pay for the precise clock: about 7 ns a read
/// here against 34 for `monotonicNs` (both through the vDSO).
pub fn monotonicCoarseNs() u64 {
    return clockNs(.MONOTONIC_COARSE) orelse monotonicNs(); // since Linux 2.6.32
}

/// The CPU time of the whole process (every thread, user and system) in nanoseconds.
pub fn processCpuNs() u64 {
    return clockNs(.PROCESS_CPUTIME_ID) orelse 0; // exists since Linux 2.6.12
}

pub const skipTest = @import("host.zig").skipTest;

/// The calling thread's CPU affinity, and the lowest CPU in it alone in a set of its own.
pub const AllowedCpus = struct {
    allowed: linux.cpu_set_t,
    lowest_only: linux.cpu_set_t,
};

/// Reads the calling thread's affinity: for tests that make threads share one CPU (set
/// `lowest_only`, then restore `allowed`). Null where it cannot be read or is empty.
pub fn allowedCpus() ?AllowedCpus {
    var cpus: AllowedCpus = .{ .allowed = undefined, .lowest_only = @splat(0) };
    if (linux.sched_getaffinity(0, @sizeOf(linux.cpu_set_t), &cpus.allowed) != 0) return null;
    for (cpus.allowed, &cpus.lowest_only) |word, *single| {
        if (word == 0) continue;
        single.* = word & (~word + 1);
        return cpus;
    }
    return null;
}

/// Gives the calling thread's CPU to another runnable thread, if any (sched_yield cannot fail).
pub fn yieldThread() void {
    _ = linux.sched_yield();
}

/// Blocks the calling OS thread for `ns` nanoseconds of CLOCK_MONOTONIC, resuming after signals.
pub fn sleepThread(ns: u64) void {
    const deadline_ns = monotonicNs() + ns;
    while (true) {
        const now_ns = monotonicNs();
        if (now_ns >= deadline_ns) return;
        const ts = timespecFromNs(deadline_ns - now_ns);
        _ = linux.clock_nanosleep(.MONOTONIC, .{ .ABSTIME = false }, &ts, null);
    }
}

pub const ReadOwnMemoryError = error{
    /// The kernel will not copy this process's own memory: `process_vm_readv` is missing
    /// (ENOSYS, qemu-user) or forbidden (EPERM, a seccomp filter).
    Unsupported,
} || UnexpectedError;

/// Copies this process's memory at `address` into `buffer` without ever faulting, and returns
/// how many bytes it copied: fewer than `buffer.len` (maybe 0) where the range reaches an
/// unmapped or guard page. For reading memory that may change or go away under the reader,
/// such as the stack of a fiber that another thread may resume (a task dump): a direct
/// load there could fault. Split into 4 KiB pieces, since the kernel copies all of an iovec
/// or none of it; pieces up to the first that failed are kept.
pub fn readOwnMemory(address: usize, buffer: []u8) ReadOwnMemoryError!usize {
    const piece_bytes = 4096;
    const pieces_max = 16;
    var locals: [pieces_max]std.posix.iovec = undefined;
    var remotes: [pieces_max]std.posix.iovec_const = undefined;
    var count: usize = 0;
    var offset: usize = 0;
    // Not past the end of the address space (garbage addresses are what this is for).
    const len = @min(buffer.len, (std.math.maxInt(usize) - address) +| 1);
    while (offset < len and count < pieces_max) : (count += 1) {
        // Pieces end on 4 KiB boundaries of the remote range, so a fault loses one page.
        const piece = @min(len - offset, piece_bytes - (address + offset) % piece_bytes);
        locals[count] = .{ .base = buffer[offset..].ptr, .len = piece };
        remotes[count] = .{ .base = @ptrFromInt(address + offset), .len = piece };
        offset += piece;
    }
    const rc = linux.process_vm_readv(linux.getpid(), locals[0..count], remotes[0..count], 0);
    return switch (errno(rc)) {
        .SUCCESS => rc,
        // The first piece is unmapped: nothing copied.
        .FAULT => 0,
        .NOSYS, .PERM => error.Unsupported,
        // Our own pid, flags 0, at most 16 iovecs: only a bug in this function.
        .INVAL, .SRCH => |e| errnoBug(e),
        // No memory for the kernel's page list: nothing copied, as for a fault.
        .NOMEM => 0,
        else => |e| unexpectedErrno(e),
    };
}

pub const GetRandomError = error{EntropyUnavailable};

/// Fills `buffer` from the kernel's CSPRNG. Blocks only before the kernel's pool is seeded.
pub fn getRandom(buffer: []u8) GetRandomError!void {
    var filled: usize = 0;
    while (filled < buffer.len) {
        const rc = linux.getrandom(buffer[filled..].ptr, buffer.len - filled, 0);
        switch (errno(rc)) {
            .SUCCESS => filled += rc,
            .INTR, .AGAIN => continue,
            .NOSYS, .FAULT, .INVAL => return error.EntropyUnavailable,
            else => return error.EntropyUnavailable,
        }
    }
}

pub fn currentTid() linux.pid_t {
    return linux.gettid();
}

/// The value of environment variable `name`, read from `/proc/self/environ` into `buffer`
/// (std 0.16 keeps no global environment; weft reads it once, at runtime init).
pub fn getEnv(name: []const u8, buffer: []u8) ?[]const u8 {
    var block: [64 * 1024]u8 = undefined;
    const environ = readFile("/proc/self/environ", &block) orelse return null;
    var entries = std.mem.splitScalar(u8, environ, 0);
    while (entries.next()) |entry| {
        if (entry.len <= name.len or entry[name.len] != '=') continue;
        if (!std.mem.eql(u8, entry[0..name.len], name)) continue;
        const value = entry[name.len + 1 ..];
        if (value.len > buffer.len) return null;
        @memcpy(buffer[0..value.len], value);
        return buffer[0..value.len];
    }
    return null;
}

/// Reads a small file (procfs, sysfs) into `buffer`, at most `buffer.len` bytes; null when it
/// cannot be opened or read. For configuration read at init, never on a fiber's hot path.
/// Opens a file to be sampled again and again (`preadStart`), such as a /proc file whose text
/// the kernel regenerates on each read; null where it cannot be opened.
pub fn openSampled(path: [*:0]const u8) ?fd_t {
    const rc = linux.open(path, .{ .CLOEXEC = true }, 0);
    if (errno(rc) != .SUCCESS) return null;
    return @intCast(rc);
}

/// One read from offset 0 of a file opened by `openSampled`; null on an error or an empty
/// read. A /proc file's text is produced whole by one read of a buffer large enough for it.
pub fn preadStart(fd: fd_t, buffer: []u8) ?[]u8 {
    const rc = linux.pread(fd, buffer.ptr, buffer.len, 0);
    if (errno(rc) != .SUCCESS or rc == 0) return null;
    return buffer[0..rc];
}

pub fn readFile(path: [*:0]const u8, buffer: []u8) ?[]u8 {
    const fd_rc = linux.open(path, .{ .CLOEXEC = true }, 0);
    if (errno(fd_rc) != .SUCCESS) return null;
    const fd: fd_t = @intCast(fd_rc);
    defer closeFd(fd);
    var len: usize = 0;
    while (len < buffer.len) {
        const rc = linux.read(fd, buffer[len..].ptr, buffer.len - len);
        switch (errno(rc)) {
            .SUCCESS => if (rc == 0) break else {
                len += rc;
            },
            .INTR => continue,
            else => return null,
        }
    }
    return buffer[0..len];
}

/// Raises the calling thread's nice value by `increment` (lowering its OS priority), capped
/// at 19. Linux keeps a nice value per thread, so only this thread changes. Raising one's own
/// nice value needs no privilege; where a sandbox forbids it anyway, the thread keeps its
/// priority (returns false): a lower priority is a preference, not a correctness matter.
pub fn lowerThreadPriority(increment: u8) bool {
    const tid: usize = @intCast(linux.gettid());
    const nice_now = threadNice() orelse return false;
    const nice_new: i32 = @min(nice_now + increment, 19);
    const value: usize = @bitCast(@as(isize, nice_new));
    return switch (errno(linux.syscall3(.setpriority, prio_process, tid, value))) {
        .SUCCESS => true,
        .ACCES, .PERM => false, // a seccomp or LSM policy: keep the priority
        .SRCH, .INVAL => unreachable, // our own tid, PRIO_PROCESS
        else => false,
    };
}

/// Asks the kernel to give the calling thread time slices of `slice_ns` (Linux 6.12's custom
/// slice for fair-class threads, `sched_attr.sched_runtime`), keeping its policy and nice
/// value. With the EEVDF scheduler a running thread is preempted by a woken one only once its
/// own slice is used up (1.4 ms by default on a 2-CPU machine), so a short slice lets other
/// threads in sooner without changing the thread's share of the CPU. Returns false where the
/// kernel refuses (older kernels, a sandbox): the thread keeps the default slice, a matter of
/// latency only.
pub fn setThreadSlice(slice_ns: u64) bool {
    assert(slice_ns >= thread_slice_ns_min and slice_ns <= thread_slice_ns_max);
    const nice = threadNice() orelse return false;
    var attr: SchedAttr = .{
        .size = @sizeOf(SchedAttr),
        .policy = sched_normal,
        .flags = 0,
        .nice = nice,
        .priority = 0,
        .runtime_ns = slice_ns,
        .deadline_ns = 0,
        .period_ns = 0,
    };
    return switch (errno(linux.syscall3(.sched_setattr, 0, @intFromPtr(&attr), 0))) {
        .SUCCESS => true,
        .ACCES, .PERM => false, // a seccomp or LSM policy
        .INVAL, .NOSYS, .@"2BIG" => false, // a kernel without custom slices
        else => false,
    };
}

/// The calling thread's time slice, or null if the kernel does not tell (tests).
pub fn threadSlice() ?u64 {
    var attr: SchedAttr = undefined;
    const rc = linux.syscall4(.sched_getattr, 0, @intFromPtr(&attr), @sizeOf(SchedAttr), 0);
    if (errno(rc) != .SUCCESS) return null;
    return attr.runtime_ns;
}

/// Custom slices the kernel accepts (kernel/sched/syscalls.c: 0.1 ms to 100 ms).
pub const thread_slice_ns_min = 100 * std.time.ns_per_us;
pub const thread_slice_ns_max = 100 * std.time.ns_per_ms;

/// `struct sched_attr`, version 0 (48 bytes): enough for the policy, nice and runtime.
const SchedAttr = extern struct {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime_ns: u64,
    deadline_ns: u64,
    period_ns: u64,
};
const sched_normal = 0;

comptime {
    assert(@sizeOf(SchedAttr) == 48);
}

/// The calling thread's nice value (-20..19), or null if the kernel refuses to tell.
pub fn threadNice() ?i32 {
    const tid: usize = @intCast(linux.gettid());
    // The raw syscall returns 20 - nice (1..40), so that no valid result looks like an errno.
    const rc = linux.syscall2(.getpriority, prio_process, tid);
    if (errno(rc) != .SUCCESS) return null;
    return 20 - @as(i32, @intCast(rc));
}

/// `which` of getpriority/setpriority: one process, or on Linux one thread (by tid).
const prio_process = 0;

/// The process's fd limits after `raiseFdLimit`.
pub const FdLimit = @import("host.zig").FdLimit;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns both: every connection is an
/// fd, and the usual soft default (1024) would cap a server (`weft.Server`) far below its
/// `connections_max`. Go's runtime does the same at start-up; weft leaves it to the program (a
/// library changing a process-wide limit behind its caller's back would surprise one that
/// lowered it on purpose). Only raising is attempted, never lowering; a failure leaves the
/// limits as they were and returns them. Public as `weft.raiseFdLimit`.
///
/// ```
/// const limit = weft.raiseFdLimit();
/// if (limit.soft < 2 * 10_000) std.log.warn("only {d} fds", .{limit.soft});
/// ```
pub fn raiseFdLimit() FdLimit {
    var limit: linux.rlimit = undefined;
    if (linux.getrlimit(.NOFILE, &limit) != 0) return .{ .soft = 0, .hard = 0 };
    if (limit.cur < limit.max) {
        const raised: linux.rlimit = .{ .cur = limit.max, .max = limit.max };
        // EPERM only if max were above what we hold, which getrlimit just returned.
        if (linux.setrlimit(.NOFILE, &raised) == 0) limit.cur = limit.max;
    }
    assert(limit.cur <= limit.max);
    return .{ .soft = limit.cur, .hard = limit.max };
}

test "maxMapCount parses the kernel's limit (newline and all)" {
    const count = maxMapCount() orelse return skipTest(@src(), "no procfs");
    try std.testing.expect(count > 0);
}

test "raiseFdLimit: lifts a lowered soft RLIMIT_NOFILE to the hard limit" {
    const testing = std.testing;
    var saved: linux.rlimit = undefined;
    try testing.expectEqual(@as(usize, 0), linux.getrlimit(.NOFILE, &saved));
    defer _ = linux.setrlimit(.NOFILE, &saved);
    if (saved.max < 512) return skipTest(@src(), "hard fd limit under 512");
    const lowered: linux.rlimit = .{ .cur = 256, .max = saved.max };
    try testing.expectEqual(@as(usize, 0), linux.setrlimit(.NOFILE, &lowered));
    const limit = raiseFdLimit();
    try testing.expectEqual(@as(u64, saved.max), limit.hard);
    try testing.expectEqual(limit.hard, limit.soft);
    var now: linux.rlimit = undefined;
    try testing.expectEqual(@as(usize, 0), linux.getrlimit(.NOFILE, &now));
    try testing.expectEqual(saved.max, now.cur);
}
