//! weft.sync: fiber-aware synchronisation primitives and channels.
//!
//! Every blocking call takes the `std.Io` it parks through (`io.futexWait`), as std's own
//! `Io.Mutex.lock(io)` does: on weft a blocked task parks its fiber, not the thread; from a
//! plain OS thread (or on `std.Io.Threaded`) it blocks the thread. All parties of one
//! primitive must use the same `Io`. Nothing here allocates: waiters queue intrusive nodes on
//! their own stacks, and buffers are provided by the caller.
//!
//! Uncontended paths are one or two atomic operations and no syscall. Contended paths hand the
//! value or permit directly to the oldest waiter (FIFO), see `WaitQueue`. The two
//! one-to-many primitives wake every waiter instead, and each reads under the lock:
//! `Broadcast(T)` (a ring that every receiver reads through its own cursor; senders never
//! wait, a receiver that fell behind is told exactly how many values it missed) and `Watch(T)`
//! (the latest value and its version; receivers wait for a newer version). Blocking calls are
//! cancelation points; a canceled or timed-out operation never loses or duplicates a value
//! (completion wins a race with cancelation, and the request is then re-armed).
//!
//! std's `Io.Mutex`, `Io.RwLock`, `Io.Condition`, `Io.Semaphore`, `Io.Event` and `Io.Queue`
//! work on weft unchanged (they are built on the same futex) and are tested under contention
//! in src/testing/sync_test.zig.
//!
//! `RwLock` is weft's own: std's `Io.RwLock` write lock is five locked operations (an add,
//! the inner mutex's CAS, another add; an and plus the mutex swap to unlock), 26.7 ns against
//! 10.3 for the mutex in docs/BENCHMARKS.md's first run; weft's keeps a one-word reader/writer
//! state on a `WaitQueue`, so a write is one CAS to lock and one to unlock, as a read is, and
//! waiters are served FIFO with reader batches (see RwLock.zig). bench/sync.zig measures both.
//!
//! No Mutex or Event of weft's own, by measurement (bench/sync.zig, ReleaseFast): std's
//! `Io.Mutex` costs one CAS to lock and one swap to unlock (sync_mutex_uncontended 10.3 ns in
//! docs/BENCHMARKS.md's run, where Tokio's best is 37.1), and `Io.Event` one swap to set and
//! one load to check: those are the floor for a futex lock and flag, and their contended paths
//! already park the fiber through weft's futex table, so a specialised copy could only match
//! them (sync_mutex_contended: 12.4 ns against 124.7).
pub const Notify = @import("Notify.zig");
pub const Oneshot = @import("oneshot.zig").Oneshot;
pub const Channel = @import("channel.zig").Channel;
pub const Broadcast = @import("broadcast.zig").Broadcast;
pub const Watch = @import("watch.zig").Watch;
pub const Barrier = @import("Barrier.zig");
pub const WaitGroup = @import("WaitGroup.zig");
pub const OnceCell = @import("once_cell.zig").OnceCell;
pub const Semaphore = @import("Semaphore.zig");
pub const RwLock = @import("RwLock.zig");
/// Waits for the first of several channel operations or futures: see select.zig.
pub const select = select_mod.select;
pub const selectWith = select_mod.selectWith;
pub const trySelect = select_mod.trySelect;
pub const Select = select_mod.Select;
pub const SelectOptions = select_mod.Options;
const select_mod = @import("select.zig");

/// The queue of waiters every primitive here is built on; not public (a building block).
const WaitQueue = @import("WaitQueue.zig");

test {
    _ = WaitQueue;
    _ = Notify;
    _ = @import("oneshot.zig");
    _ = @import("channel.zig");
    _ = @import("broadcast.zig");
    _ = @import("watch.zig");
    _ = Barrier;
    _ = WaitGroup;
    _ = @import("once_cell.zig");
    _ = Semaphore;
    _ = RwLock;
    _ = select_mod;
}
