//! weft: an async I/O runtime that implements `std.Io` on stackful fibers and io_uring.
//!
//! ```
//! var rt = try weft.Runtime.init(gpa, .{});
//! defer rt.deinit();
//! const io = rt.io(); // pass it to any code written against std.Io
//! ```
//!
//! Layers, each depending only on those before it: `os` (syscalls) → `loop` (completion loop,
//! io_uring or epoll) → `fiber` (stacks, context switch) → `sched` (tasks, executor, futex,
//! timers) → `std_io` (the VTable) → `Runtime` → `Server`.
const std = @import("std");

pub const Runtime = @import("Runtime.zig");
pub const config = @import("config.zig");
/// One connection handler served `.single`, `.threaded` or `.forked`; `Server.http` serves
/// HTTP/1.1 with std.http.Server.
pub const Server = @import("server/Server.zig");
/// Fiber-aware sync primitives and channels (Notify, Oneshot, Channel, ...).
pub const sync = @import("sync/root.zig");
/// A bounded pool of OS threads for blocking calls (and `Lane.Sharded`).
pub const Lane = @import("lanes/Lane.zig");
/// The CPU lane: computation on about one thread per CPU, apart from the executors
/// (`Runtime.compute` runs on the runtime's own).
pub const CpuLane = @import("lanes/CpuLane.zig");
/// A fixed table of exclusive resources: ids with generations, transactions with a bounded
/// FIFO line of waiters, destroy, and a teardown for every resource.
pub const Registry = @import("sync/Registry.zig").Registry;

test {
    std.testing.refAllDecls(@This());
    // Every file that has tests, in path order: src/testing/tidy_test.zig fails, printing the
    // list to paste, when this one is not.
    _ = @import("contention/RunDelay.zig");
    _ = @import("contention/RunnableCount.zig");
    _ = @import("contention/cpu_demand.zig");
    _ = @import("fiber/context.zig");
    _ = @import("fiber/stack.zig");
    _ = @import("fs/syscall.zig");
    _ = @import("intrusive.zig");
    _ = @import("lanes/CpuLane.zig");
    _ = @import("lanes/Lane.zig");
    _ = @import("loop/Completion.zig");
    _ = @import("loop/Loop.zig");
    _ = @import("loop/nonblocking.zig");
    _ = @import("net/ResolvConf.zig");
    _ = @import("net/dns.zig");
    _ = @import("net/dns_tcp.zig");
    _ = @import("net/hosts.zig");
    _ = @import("net/interface.zig");
    _ = @import("net/lookup.zig");
    _ = @import("os/Mutex.zig");
    _ = @import("os/SpinLock.zig");
    _ = @import("os/atomic.zig");
    _ = @import("os/linux.zig");
    _ = @import("os/thread.zig");
    _ = @import("sched/RunQueue.zig");
    _ = @import("sched/Scheduler.zig");
    _ = @import("sched/Task.zig");
    _ = @import("sched/Timers.zig");
    _ = @import("sched/futex.zig");
    _ = @import("sched/overflow.zig");
    _ = @import("server/http/Body.zig");
    _ = @import("server/http/head.zig");
    _ = @import("std_io/fs_errno.zig");
    _ = @import("std_io/iovecs.zig");
    _ = @import("sync/Barrier.zig");
    _ = @import("sync/Notify.zig");
    _ = @import("sync/Registry.zig");
    _ = @import("sync/RwLock.zig");
    _ = @import("sync/Semaphore.zig");
    _ = @import("sync/WaitGroup.zig");
    _ = @import("sync/WaitQueue.zig");
    _ = @import("sync/broadcast.zig");
    _ = @import("sync/channel.zig");
    _ = @import("sync/once_cell.zig");
    _ = @import("sync/oneshot.zig");
    _ = @import("sync/root.zig");
    _ = @import("sync/select.zig");
    _ = @import("sync/watch.zig");
    _ = @import("testing/InterleavingChecker.zig");
    _ = @import("testing/compat_test.zig");
    _ = @import("testing/cpu_test.zig");
    _ = @import("testing/fd_test.zig");
    _ = @import("testing/fs_test.zig");
    _ = @import("testing/http_test.zig");
    _ = @import("testing/lane_test.zig");
    _ = @import("testing/lookup_test.zig");
    _ = @import("testing/net_test.zig");
    _ = @import("testing/overflow_test.zig");
    _ = @import("testing/process_test.zig");
    _ = @import("testing/readme_test.zig");
    _ = @import("testing/registry_test.zig");
    _ = @import("testing/runtime_test.zig");
    _ = @import("testing/scheduler_test.zig");
    _ = @import("testing/select_test.zig");
    _ = @import("testing/server_test.zig");
    _ = @import("testing/sync_test.zig");
    _ = @import("testing/tidy_test.zig");
}
