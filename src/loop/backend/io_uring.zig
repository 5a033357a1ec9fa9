//! The io_uring backend: one ring per executor thread.
//!
//! Ring flags, in order of preference (each falls back to the next on EINVAL):
//! - `SINGLE_ISSUER | DEFER_TASKRUN` (6.1+): only the executor thread submits, and the kernel
//!   runs completion work only when that thread asks for events, so completions never
//!   interrupt a running fiber and arrive in batches.
//! - `SINGLE_ISSUER | COOP_TASKRUN` (5.19+): the same without deferral.
//! - none.
//! Each of the first two is tried with `TASKRUN_FLAG` first, so that a rescuer (`Loop.rescue`)
//! can tell whether the kernel holds completions back for the ring's thread.
//! SQPOLL is rejected: a kernel thread spinning per ring would take one of our two cores.
//! Waiting with a timeout uses `IORING_ENTER_EXT_ARG` (5.11+), so no timeout SQE is needed; a
//! kernel without it gets the epoll backend instead.
const IoUringBackend = @This();

const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const assert = std.debug.assert;
const config = @import("../../config.zig");
const os = @import("../../os/linux.zig");
const Completion = @import("../Completion.zig");

ring: linux.IoUring,
/// The operations this kernel implements, from IORING_REGISTER_PROBE (5.6+); without a probe
/// only the readiness operations, which every kernel with EXT_ARG has, count.
supported: std.EnumSet(Completion.Op.Tag),
wake_fd: os.fd_t,
wake_buffer: u64 = 0,
/// Whether the read of `wake_fd` is queued or in flight (its completion not reaped yet): a
/// blocking wait needs it. Written by whoever holds the loop's reap lock.
wake_armed: bool = false,
/// Whether the kernel holds completions back until this thread enters (`DEFER_TASKRUN`, or
/// `COOP_TASKRUN` which runs them at its next kernel transition), and if so whether it says
/// when it does (`TASKRUN_FLAG`: `IORING_SQ_TASKRUN` in the shared flags).
holds_back: enum { never, flagged, unflagged },
cqes: [config.reap_batch_max]linux.io_uring_cqe = undefined,

/// `user_data` of the eventfd read that wakes the ring up from other threads.
const wake_user_data: u64 = 1;
/// `user_data` of cancel requests, whose own completions carry nothing to report.
const cancel_user_data: u64 = 0;

pub const InitError = error{ Unsupported, SystemResources } || os.EventFdError;

pub fn init(backend: *IoUringBackend) InitError!void {
    const single = linux.IORING_SETUP_SINGLE_ISSUER;
    const flag_choices = [_]u32{
        single | linux.IORING_SETUP_DEFER_TASKRUN | linux.IORING_SETUP_TASKRUN_FLAG,
        single | linux.IORING_SETUP_DEFER_TASKRUN,
        single | linux.IORING_SETUP_COOP_TASKRUN | linux.IORING_SETUP_TASKRUN_FLAG,
        single | linux.IORING_SETUP_COOP_TASKRUN,
        0,
    };
    const deferring = linux.IORING_SETUP_DEFER_TASKRUN | linux.IORING_SETUP_COOP_TASKRUN;
    var ring_flags: u32 = 0;
    const ring = for (flag_choices) |flags| {
        ring_flags = flags;
        break linux.IoUring.init(config.ring_entries, flags) catch |err| switch (err) {
            error.ArgumentsInvalid => continue,
            error.SystemResources => return error.SystemResources,
            error.ProcessFdQuotaExceeded => return error.ProcessFdQuotaExceeded,
            error.SystemFdQuotaExceeded => return error.SystemFdQuotaExceeded,
            else => return error.Unsupported,
        };
    } else return error.Unsupported;
    errdefer {
        var r = ring;
        r.deinit();
    }
    if (ring.features & linux.IORING_FEAT_EXT_ARG == 0) return error.Unsupported;
    const wake_fd = try os.eventFd();
    var ring_probing = ring;
    const supported = probeSupported(&ring_probing);
    backend.* = .{
        .ring = ring,
        .supported = supported,
        .wake_fd = wake_fd,
        .holds_back = if (ring_flags & linux.IORING_SETUP_TASKRUN_FLAG != 0)
            .flagged
        else if (ring_flags & deferring != 0)
            .unflagged
        else
            .never,
    };
    backend.armWake();
}

pub fn deinit(backend: *IoUringBackend) void {
    backend.ring.deinit();
    os.closeFd(backend.wake_fd);
    backend.* = undefined;
}

fn getSqe(backend: *IoUringBackend) *linux.io_uring_sqe {
    return backend.ring.get_sqe() catch {
        // The submission queue is full: hand it to the kernel and take a fresh entry.
        backend.enter(0, false);
        return backend.ring.get_sqe() catch unreachable; // the queue was just emptied
    };
}

pub fn armWake(backend: *IoUringBackend) void {
    assert(!backend.wake_armed); // one read of the eventfd at a time
    backend.wake_armed = true;
    const sqe = backend.getSqe();
    sqe.prep_read(backend.wake_fd, std.mem.asBytes(&backend.wake_buffer), 0);
    sqe.user_data = wake_user_data;
}

pub fn submit(backend: *IoUringBackend, completion: *Completion) void {
    const sqe = backend.getSqe();
    switch (completion.op) {
        .read => |op| sqe.prep_readv(op.fd, op.iovecs, op.offset orelse std.math.maxInt(u64)),
        .write => |op| sqe.prep_writev(op.fd, op.iovecs, op.offset orelse std.math.maxInt(u64)),
        .poll => |op| sqe.prep_poll_add(op.fd, op.events),
        .accept => |op| sqe.prep_accept(op.fd, op.addr, op.addr_len, op.flags),
        .connect => |op| sqe.prep_connect(op.fd, op.addr, op.addr_len),
        .recvmsg => |op| sqe.prep_recvmsg(op.fd, op.msg, op.flags),
        .sendmsg => |op| sqe.prep_sendmsg(op.fd, op.msg, op.flags),
        .recv => |op| sqe.prep_recv(op.fd, op.buffer, op.flags),
        .send => |op| sqe.prep_send(op.fd, op.buffer, op.flags),
        .openat => |op| {
            sqe.prep_openat(op.fd, op.path, op.flags, op.mode);
            // io_uring first tries an open inline, in this thread's `io_uring_enter`, adding
            // `O_NONBLOCK` (and removing it from the file after). For a FIFO or a device that
            // changes what the open does, not only whether it waits: a FIFO's reader opens
            // without waiting for a writer (and then reads end of file), a writer without a
            // reader fails with ENXIO. And a file system's own open may wait all the same (a
            // FUSE file or directory for its daemon, an NFSv4 file for its server), holding
            // the executor. Only an `O_PATH` open runs no such code; any other goes straight
            // to io_uring's workers, which open as `openat` does. (Cached regular files and
            // directories on local mounts are opened before this, on the executor:
            // fs/nowait.zig.)
            if (!op.flags.PATH) sqe.flags |= linux.IOSQE_ASYNC;
        },
        .statx => |op| sqe.prep_statx(op.fd, op.path, op.flags, op.mask, op.buffer),
        .fsync => |op| {
            sqe.prep_fsync(op.fd, if (op.datasync) linux.IORING_FSYNC_DATASYNC else 0);
        },
        // std has no helper: the length travels in the offset field (Linux 6.9+).
        .ftruncate => |op| sqe.prep_rw(.FTRUNCATE, op.fd, 0, 0, op.length),
        .unlinkat => |op| sqe.prep_unlinkat(op.fd, op.path, op.flags),
        .renameat => |op| sqe.prep_renameat(op.fd, op.path, op.new_fd, op.new_path, op.flags),
        .mkdirat => |op| sqe.prep_mkdirat(op.fd, op.path, op.mode),
        .symlinkat => |op| sqe.prep_symlinkat(op.target, op.fd, op.path),
        .linkat => |op| sqe.prep_linkat(op.fd, op.path, op.new_fd, op.new_path, op.flags),
        .waitid => |op| sqe.prep_waitid(.PID, op.pid, op.info, op.options, 0),
    }
    sqe.user_data = @intFromPtr(completion);
}

/// Whether this ring can run `tag` asynchronously (file system and process operations came
/// to io_uring over several kernel releases: FTRUNCATE in 6.9, WAITID in 6.7).
pub fn supports(backend: *const IoUringBackend, tag: Completion.Op.Tag) bool {
    return backend.supported.contains(tag);
}

fn probeSupported(ring: *linux.IoUring) std.EnumSet(Completion.Op.Tag) {
    var supported: std.EnumSet(Completion.Op.Tag) = .initEmpty();
    const probe = ring.get_probe() catch null;
    for (std.enums.values(Completion.Op.Tag)) |tag| {
        if (Completion.Op.isReadiness(tag)) {
            supported.insert(tag);
            continue;
        }
        const opcode: linux.IORING_OP = switch (tag) {
            .openat => .OPENAT,
            .statx => .STATX,
            .fsync => .FSYNC,
            .ftruncate => .FTRUNCATE,
            .unlinkat => .UNLINKAT,
            .renameat => .RENAMEAT,
            .mkdirat => .MKDIRAT,
            .symlinkat => .SYMLINKAT,
            .linkat => .LINKAT,
            .waitid => .WAITID,
            .read, .write, .poll => unreachable, // above
            .accept, .connect, .recvmsg, .sendmsg, .recv, .send => unreachable, // above
        };
        if (probe) |p| if (p.is_supported(opcode)) supported.insert(tag);
    }
    return supported;
}

pub fn cancel(backend: *IoUringBackend, completion: *Completion) void {
    assert(completion.state == .submitted);
    const sqe = backend.getSqe();
    sqe.prep_cancel(@intFromPtr(completion), 0);
    sqe.user_data = cancel_user_data;
}

/// Submits what is queued and reaps completions into `reaped`; waits up to `timeout_ns` for at
/// least one (null: without limit, 0: not at all).
pub fn poll(backend: *IoUringBackend, timeout_ns: ?u64, reaped: *Completion.Queue) Reaped {
    // A wait that no other thread could end would be a hang.
    assert(timeout_ns == 0 or backend.wake_armed);
    backend.enter(timeout_ns, timeout_ns != 0);
    const sorted = backend.reapPosted(reaped, .loop_thread);
    if (sorted.woken) backend.armWake();
    return sorted;
}

const Reaped = Completion.Reaped;
const Reaper = Completion.Reaper;

/// Moves the completions the kernel has posted to `reaped`, setting each one's result, without
/// entering the kernel (but for an overflowed completion queue on the ring's thread, which
/// std's `copy_cqes` flushes). Leaves re-arming the wake-up read to the caller.
pub fn reapPosted(backend: *IoUringBackend, reaped: *Completion.Queue, reaper: Reaper) Reaped {
    var sorted: Reaped = .{};
    // Bounded: at most two batches; what is left stays in the ring for the next reap.
    for (0..2) |_| {
        const count = switch (reaper) {
            .loop_thread => backend.ring.copy_cqes(&backend.cqes, 0) catch 0,
            .rescuer => backend.copyPosted(),
        };
        for (backend.cqes[0..count]) |cqe| {
            switch (cqe.user_data) {
                cancel_user_data => {},
                wake_user_data => {
                    assert(backend.wake_armed);
                    backend.wake_armed = false;
                    sorted.woken = true;
                },
                else => {
                    const completion: *Completion = @ptrFromInt(cqe.user_data);
                    assert(completion.state == .submitted);
                    completion.result = cqe.res;
                    reaped.push(completion);
                    sorted.completions += 1;
                },
            }
        }
        if (count < backend.cqes.len) break;
    }
    return sorted;
}

/// `copy_cqes` without its `io_uring_enter`: only what is in the completion queue now.
fn copyPosted(backend: *IoUringBackend) u32 {
    const cq = &backend.ring.cq;
    const count: u32 = @min(backend.cqes.len, backend.ring.cq_ready());
    for (backend.cqes[0..count], 0..) |*cqe, offset| {
        cqe.* = cq.cqes[(cq.head.* +% @as(u32, @intCast(offset))) & cq.mask];
    }
    backend.ring.cq_advance(count);
    return count;
}

/// Whether this thread has work a rescuer cannot see without it (`postDeferred`): operations
/// queued but not submitted, or completions the kernel holds back for it. Only under the
/// loop's reap lock, which the thread holds while it fills the queue.
pub fn needsPost(backend: *const IoUringBackend) bool {
    const sq = &backend.ring.sq;
    if (sq.sqe_tail != sq.sqe_head) return true;
    return switch (backend.holds_back) {
        .never => false,
        .flagged => @atomicLoad(u32, sq.flags, .acquire) & linux.IORING_SQ_TASKRUN != 0,
        .unflagged => true,
    };
}

/// Called on the ring's thread from a signal handler (`Loop.postDeferred`) while a task holds
/// that thread: submits what is queued if `submit_queued` (the interrupted code is not filling the
/// queue) and has the kernel post the completions it holds back for the thread's next entering
/// (`DEFER_TASKRUN`), so that a rescuer can reap them. Async-signal-safe: one system call,
/// whose failure (none is expected: a full completion queue, short memory) leaves the work for
/// the thread's next poll.
pub fn postDeferred(backend: *IoUringBackend, submit_queued: bool) void {
    const to_submit = if (submit_queued) backend.ring.flush_sq() else 0;
    _ = linux.syscall6(
        .io_uring_enter,
        @as(usize, @intCast(backend.ring.fd)),
        to_submit,
        0,
        linux.IORING_ENTER_GETEVENTS,
        0,
        0,
    );
}

fn enter(backend: *IoUringBackend, timeout_ns: ?u64, wait: bool) void {
    const to_submit = backend.ring.flush_sq();
    var flags: u32 = linux.IORING_ENTER_GETEVENTS;
    var ts: linux.kernel_timespec = undefined;
    var arg: linux.io_uring_getevents_arg = .{ .sigmask = 0, .sigmask_sz = 0, .pad = 0, .ts = 0 };
    if (wait) {
        if (timeout_ns) |ns| {
            ts = .{
                .sec = @intCast(ns / std.time.ns_per_s),
                .nsec = @intCast(ns % std.time.ns_per_s),
            };
            arg.ts = @intFromPtr(&ts);
        }
        flags |= linux.IORING_ENTER_EXT_ARG;
    }
    // With EXT_ARG the last two arguments are the getevents argument and its size, which
    // std's wrapper (built for a sigset) does not pass.
    const rc = linux.syscall6(
        .io_uring_enter,
        @as(usize, @intCast(backend.ring.fd)),
        to_submit,
        if (wait) 1 else 0,
        flags,
        if (wait) @intFromPtr(&arg) else 0,
        if (wait) @sizeOf(linux.io_uring_getevents_arg) else 0,
    );
    switch (os.errno(rc)) {
        // ETIME: the timeout passed; INTR: a signal; both just end this wait.
        .SUCCESS, .TIME, .INTR => {},
        // The kernel is short of memory for requests or the CQ is overcommitted: the
        // completions already posted are reaped by the caller, which makes room.
        .AGAIN, .BUSY => {},
        .BADF, .BADFD, .FAULT, .INVAL, .NXIO, .OPNOTSUPP, .EXIST => |e| {
            std.debug.panic("weft: io_uring_enter failed: {t}", .{e});
        },
        else => |e| std.debug.panic("weft: io_uring_enter failed: {t}", .{e}),
    }
}

pub fn wake(backend: *IoUringBackend) void {
    os.eventFdSignal(backend.wake_fd);
}
