//! Names a fiber stack overflow before the process dies.
//!
//! A fiber that overflows its guarded stack (`.stack_guard = .page`, the default) faults on
//! the guard page, and all std would print is "Segmentation fault at address 0x...". weft puts
//! its own SIGSEGV handler in front of whatever the process had (std's segfault handler, a
//! program's own, or the default action). When the fault lies in the guard page of the stack
//! of the task running on the faulting thread, it writes one line to stderr first:
//!
//!     weft: stack overflow in task 0x...: it used all of its stack 0x...-0x... (65536 bytes,
//!     the lowest 4096 its guard page; fault at 0x...). Raise weft.Runtime.Options
//!     .stack_size_bytes, or recurse less.
//!
//! Then, overflow or not, it puts the previous action back and lets the fault happen again:
//! the faulting instruction runs again on return, and the kernel delivers the fault to the
//! previous handler with its own flags and mask (std's prints the stack trace and aborts; the
//! default action kills the process). A SIGSEGV sent by a process (not a fault) is sent again.
//! (Rejected: calling the previous handler from ours. It would run with our flags and mask,
//! not its own, and a `SA_RESETHAND` it asked for would never happen.) So after the first
//! SIGSEGV, ours is gone; the next `Runtime.init` puts it back if the process lives on.
//!
//! Why a lookup this small is enough: a guard page faults only when touched by the fiber
//! whose stack it guards (or by a wild pointer, which is not an overflow and is not named),
//! and that fiber's task is the one `Executor.currentTask` returns on the faulting thread. A
//! thread-local read and two comparisons, safe in a signal handler; no table of slabs to keep
//! in step with the pools. (Rejected: an atomic list of every slab's range, which names an
//! overflow only as well and must be maintained as slabs come and go.)
//!
//! The handler must run on an alternate signal stack: the faulting fiber has no stack left,
//! so the kernel could not even push the signal frame onto it and would kill the process with
//! no word. std gives every thread it starts one of `std.options.signal_stack_size` bytes;
//! an executor whose thread has none (a program that set that option to null) maps its own
//! (`ensureSignalStack`).
//!
//! Not installed for `.stack_guard = .none` (nothing faults there: `fiber/stack.zig` panics
//! with its own message at the next switch), nor under ThreadSanitizer, which takes SIGSEGV
//! itself and does not expect instrumented code to run in a handler it did not wrap. Only
//! SIGSEGV: a guard page, marker or `PROT_NONE`, never raises SIGBUS.
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const assert = std.debug.assert;
const config = @import("../config.zig");
const os = @import("../os/linux.zig");
const Mutex = @import("../os/Mutex.zig");
const Stack = @import("../fiber/stack.zig").Stack;
const Executor = @import("Executor.zig");
const Task = @import("Task.zig");
const os_thread = @import("../os/thread.zig");

const page_size = std.heap.page_size_min;

/// Serialises `install`: two runtimes starting at once must not both take the other's
/// handler for the previous one (which would chain the handler to itself).
var install_lock: Mutex = .{};
/// The SIGSEGV action before ours, put back by the handler. Written under `install_lock` only
/// while ours is not installed, so never while the handler may read it.
var previous: linux.Sigaction = undefined;

/// Puts weft's SIGSEGV handler in front of the current one, unless it is there already.
/// Process-wide and idempotent; the handler stays after the runtime ends (it only names
/// overflows of weft tasks, and hands every fault on as before). Thread-safe.
pub fn install() void {
    if (builtin.sanitize_thread) return;
    install_lock.lock();
    defer install_lock.unlock();
    var current: linux.Sigaction = undefined;
    assert(linux.sigaction(.SEGV, null, &current) == 0);
    if (current.handler.sigaction == &handle) return;
    previous = current;
    const action: linux.Sigaction = .{
        .handler = .{ .sigaction = &handle },
        .mask = linux.sigemptyset(),
        .flags = linux.SA.SIGINFO | linux.SA.ONSTACK | linux.SA.RESTART,
    };
    assert(linux.sigaction(.SEGV, &action, null) == 0);
}

/// Whether weft's handler is the process's SIGSEGV action now.
pub fn installed() bool {
    var current: linux.Sigaction = undefined;
    assert(linux.sigaction(.SEGV, null, &current) == 0);
    return current.handler.sigaction == &handle;
}

/// Gives the calling thread an alternate signal stack if it has none, and returns the mapping
/// to release with `releaseSignalStack`; null if the thread had one (std's).
pub fn ensureSignalStack() os.MapError!?[]align(page_size) u8 {
    var current: linux.stack_t = undefined;
    assert(linux.sigaltstack(null, &current) == 0);
    if (current.flags & linux.SS.DISABLE == 0) return null;
    const len = config.signal_stack_size_bytes;
    const memory = (try os.mapAnonymous(len))[0..len];
    const stack: linux.stack_t = .{ .sp = memory.ptr, .flags = 0, .size = len };
    assert(linux.sigaltstack(&stack, null) == 0);
    return memory;
}

/// Releases a stack from `ensureSignalStack`. `on_its_thread`: the caller is the thread it was
/// given to (executor 0, whose thread lives on), which must stop using it first; a thread that
/// has exited needs nothing undone.
pub fn releaseSignalStack(memory: []align(page_size) u8, on_its_thread: bool) void {
    assert(memory.len == config.signal_stack_size_bytes);
    if (on_its_thread) {
        var current: linux.stack_t = undefined;
        assert(linux.sigaltstack(null, &current) == 0);
        if (current.sp == memory.ptr) {
            const disabled: linux.stack_t = .{
                .sp = undefined,
                .flags = linux.SS.DISABLE,
                .size = 0,
            };
            assert(linux.sigaltstack(&disabled, null) == 0);
        }
    }
    os.unmap(memory);
}

/// The SIGSEGV handler; runs on the alternate signal stack.
fn handle(sig: linux.SIG, info: *const linux.siginfo_t, context: ?*anyopaque) callconv(.c) void {
    _ = context;
    assert(sig == .SEGV);
    // A positive code is the kernel's (a fault); zero or less, a process sent the signal.
    const from_fault = info.code > 0;
    const fault_address = @intFromPtr(info.fields.sigfault.addr);
    if (from_fault) {
        if (overflowed(fault_address)) |task| {
            report(task, task.stack.?, fault_address);
        } else if (threadOverflowed(fault_address)) |thread| {
            reportThread(thread, fault_address);
        }
    }
    _ = linux.sigaction(.SEGV, &previous, null);
    // A fault happens again when the instruction runs again on return; a sent signal (blocked
    // while this handler runs) must be sent again.
    if (!from_fault) _ = linux.tgkill(linux.getpid(), linux.gettid(), .SEGV);
}

/// The task running on this thread if `fault_address` lies in its stack's guard page.
fn overflowed(fault_address: usize) ?*Task {
    // The executor's idle context and the main task run on thread stacks, not pool stacks.
    const task = Executor.currentTask() orelse return null;
    const stack = task.stack orelse return null;
    return if (inGuardPage(stack, fault_address)) task else null;
}

/// Below a thread's stack, how far a fault is taken for its overflow: its guard (a page with
/// std's or glibc's threads), and the reach of a frame that skipped past it.
const thread_guard_window_bytes = 64 * 1024;

/// A thread weft started whose stack overflowed, and that stack's mapping.
const ThreadOverflow = struct { named: os_thread.Named, low: usize, high: usize };

/// This thread's record (a thread weft started: an executor, a lane worker) and its stack's
/// mapping, if `fault_address` lies just below that stack. The mapping is read from
/// /proc/self/maps now, for a fault below where the thread started: the thread's start read
/// nothing (os/thread.zig). (Rejected: skipping the read for a fault farther below than the
/// stack size asked for. glibc hands a thread a cached stack of an exited one, larger than
/// asked, and an overflow there went unnamed.)
fn threadOverflowed(fault_address: usize) ?ThreadOverflow {
    const thread = os_thread.current() orelse return null;
    if (fault_address >= thread.start_address) return null;
    const range = os_thread.mappingOf(thread.start_address) orelse return null;
    if (fault_address >= range[0]) return null;
    if (range[0] - fault_address > thread_guard_window_bytes) return null;
    return .{ .named = thread, .low = range[0], .high = range[1] };
}

fn inGuardPage(stack: Stack, address: usize) bool {
    const base = @intFromPtr(stack.memory.ptr);
    return address >= base and address < base + page_size;
}

/// Writes the overflow's line to stderr with write(2): no lock, no allocation, no std.debug
/// (which may be mid-print on another thread, holding its lock).
fn report(task: *Task, stack: Stack, fault_address: usize) void {
    var buffer: [400]u8 = undefined;
    const line = std.fmt.bufPrint(&buffer, "weft: stack overflow in task 0x{x}: it used all of " ++
        "its stack 0x{x}-0x{x} ({d} bytes, the lowest {d} its guard page; fault at 0x{x}). " ++
        "Raise weft.Runtime.Options.stack_size_bytes, or recurse less.\n", .{
        @intFromPtr(task), @intFromPtr(stack.memory.ptr), stack.top(),
        stack.memory.len,  page_size,                     fault_address,
    }) catch unreachable; // the buffer holds the longest line (six 64-bit numbers)
    writeLine(line);
}

fn reportThread(thread: ThreadOverflow, fault_address: usize) void {
    var buffer: [400]u8 = undefined;
    const line = std.fmt.bufPrint(&buffer, "weft: stack overflow in {s} thread {d}: it used " ++
        "all of its stack 0x{x}-0x{x} ({d} bytes; fault at 0x{x}). Raise {s}, or recurse " ++
        "less.\n", .{
        thread.named.what,        linux.gettid(), thread.low,          thread.high,
        thread.high - thread.low, fault_address,  thread.named.option,
    }) catch |err| switch (err) {
        // An option name longer than any weft gives: say what fits.
        error.NoSpaceLeft => &buffer,
    };
    writeLine(line);
}

fn writeLine(line: []const u8) void {
    var written: usize = 0;
    // Bounded: a pipe may take the line in pieces, but a stuck stderr must not hold the crash.
    for (0..16) |_| {
        const rc = linux.write(2, line[written..].ptr, line.len - written);
        switch (linux.errno(rc)) {
            .SUCCESS => written += rc,
            .INTR => {},
            else => return, // stderr closed or broken: the previous handler still runs
        }
        if (written == line.len) return;
    }
}

test "overflow: the guard page is the lowest page of a stack, nothing above or below" {
    var memory: [4 * page_size]u8 align(page_size) = undefined;
    const stack: Stack = .{ .memory = &memory };
    const base = @intFromPtr(&memory);
    try std.testing.expect(inGuardPage(stack, base));
    try std.testing.expect(inGuardPage(stack, base + page_size - 1));
    try std.testing.expect(!inGuardPage(stack, base + page_size));
    try std.testing.expect(!inGuardPage(stack, base - 1));
    try std.testing.expect(!inGuardPage(stack, stack.top() - 8));
}
