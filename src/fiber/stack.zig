//! Fiber stacks: carved from shared slab mappings, guarded, pooled and reused.
//!
//! Why slabs: zio maps each fiber stack plus a guard separately, two kernel mappings per fiber,
//! and stops near 32,700 live fibers because `vm.max_map_count` defaults to 65,530. A
//! `MAP_GROWSDOWN` stack is one mapping, but the kernel does not keep its guard gap against a
//! neighbouring growsdown stack, so an overflow can run into the next stack (checked here).
//!
//! weft maps `slab_stacks` stacks at once and installs the guard page of each with
//! `madvise(MADV_GUARD_INSTALL)` (Linux 6.13+): a guard marker lives in the page table, so
//! touching it faults, yet the slab stays one mapping. A million guarded stacks cost about
//! 4,000 mappings. The guards of a new slab are installed with one `process_madvise` call where
//! the kernel takes it (6.15+ with `PIDFD_SELF`), one `madvise` per stack otherwise. On kernels
//! without guard markers the guard falls back to `mprotect(PROT_NONE)`, which splits the slab
//! into two mappings per stack; that ceiling is reported once, with what to change.
//!
//! `.none` (dense) skips guards: a million fibers then cost one page fault each and no syscall.
//! The trade-off, stated plainly: an overflow is not prevented. At every switch away from a
//! fiber weft checks that its stack pointer is still above the lowest page of its stack and
//! panics if not, which catches a fiber parked too deep; an overflow that unwinds before the
//! next switch writes into the neighbouring stack unnoticed. (A canary word at the bottom of
//! each stack was rejected: writing it commits a second page per fiber, doubling the memory
//! and the page faults of a million sleepers.)
//!
//! Free stacks idle for a whole `config.stack_idle_ns` give their pages back (`Pool.trim`,
//! swept from each executor's poll), past a hot set of `config.pool_hot_stacks` per pool; they
//! wait in `Shared.trimmed`, uncommitted, and are handed out again before a new slab is mapped.
//! Unmapping whole idle slabs was rejected: the free lists mix the stacks of every slab, so a
//! slab is rarely all free, and a guarded slab costs a guard per stack to map again.
//!
//! Slabs are marked `MADV_NOHUGEPAGE`: with transparent huge pages set to `always`, the kernel
//! would otherwise back the first touch of a 2 MiB range with a huge page shared by eight
//! mostly-idle stacks, or stall in compaction trying to.
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const assert = std.debug.assert;
const config = @import("../config.zig");
// Linux's calls: the guard markers, the residency walk, the map count.
const os = @import("../os/linux.zig");
// The calls that have an equivalent on every OS (mapping, unmapping, protecting).
const host = @import("../os/host.zig");
const memory_limits = @import("../os/memory_limits.zig");

const SpinLock = @import("../os/SpinLock.zig");
const Counter = @import("../os/Counter.zig");

const page_size = std.heap.page_size_min;
const log = std.log.scoped(.weft);

pub const Guard = @import("../options.zig").StackGuard;

/// One fiber stack. The fiber runs from `top()` downwards; `memory[0..page_size]` is the guard
/// page when the pool guards stacks.
pub const Stack = struct {
    memory: []align(page_size) u8,

    pub fn top(stack: Stack) usize {
        return @intFromPtr(stack.memory.ptr) + stack.memory.len;
    }

    /// Whether `address` (a stack pointer of the fiber on this stack) lies above the lowest
    /// page, which a guarded stack gives to its guard and an unguarded one keeps as a margin.
    pub fn contains(stack: Stack, address: usize) bool {
        return address >= @intFromPtr(stack.memory.ptr) + page_size and address <= stack.top();
    }
};

/// How a runtime's stacks fit the process's memory limits (`plan`).
pub const Plan = struct {
    /// Stacks per slab (`Pool.slab_stacks`).
    slab_stacks: usize,
    /// Live tasks at most: the runtime's option, or fewer where a limit leaves less room.
    tasks_max: usize,
};

pub const PlanError = error{
    /// `RLIMIT_AS` (`ulimit -v`) leaves no room for one fiber stack beside what the process
    /// maps already and `config.address_space_reserve_bytes` for the rest of it.
    AddressSpaceLimit,
    /// The cgroup's `memory.max` leaves no room for one task (`config.task_committed_bytes_min`).
    MemoryLimit,
};

/// Sizes the stacks and the task ceiling to `limits` for `executors` pools of stacks of
/// `stack_size_bytes`, each task also mapping `task_bytes` beside its stack (its table entry).
/// Under `RLIMIT_AS` the address space decides: each stack is reserved whole. Under a cgroup
/// `memory.max` the memory a task commits does: a reservation costs nothing there, a touched
/// page does. No limit: `config.slab_stacks` and `tasks_max` unchanged.
pub fn plan(
    limits: memory_limits.Limits,
    stack_size_bytes: usize,
    executors: usize,
    tasks_max: usize,
    task_bytes: usize,
) PlanError!Plan {
    assert(stack_size_bytes >= config.stack_size_bytes_min);
    assert(executors >= 1);
    var result: Plan = .{ .slab_stacks = config.slab_stacks, .tasks_max = tasks_max };
    if (limits.address_space_bytes) |limit_bytes| {
        const room_bytes = limit_bytes -| limits.address_space_used_bytes -|
            config.address_space_reserve_bytes;
        const fit = room_bytes / (stack_size_bytes + task_bytes);
        if (fit == 0) return error.AddressSpaceLimit;
        result.tasks_max = @min(result.tasks_max, fit);
        const slab_stacks = fit / (executors * config.slab_share_of_fit);
        result.slab_stacks = std.math.clamp(slab_stacks, 1, config.slab_stacks);
    }
    if (limits.cgroup_memory_bytes) |max_bytes| {
        const room_bytes = (max_bytes -| limits.cgroup_memory_used_bytes) /
            config.cgroup_memory_share;
        // A touched page of stack costs its share of a page table too: 8 bytes per 4 KiB.
        const page_tables_bytes = stack_size_bytes / 512;
        const fit = room_bytes / (config.task_committed_bytes_min + page_tables_bytes);
        if (fit == 0) return error.MemoryLimit;
        result.tasks_max = @min(result.tasks_max, fit);
    }
    assert(result.slab_stacks >= 1 and result.slab_stacks <= config.slab_stacks);
    assert(result.tasks_max <= tasks_max);
    return result;
}

pub const AcquireError = error{
    /// The kernel refused a new slab or guard (memory, or `vm.max_map_count`).
    SystemResources,
};

/// Free stacks shared by the pools of one runtime, under a lock taken once per
/// `config.pool_spill_stacks` stacks: a pool holding more than `config.pool_free_max` free
/// stacks hands a batch here, and a pool out of free stacks takes a batch from here before it
/// maps a slab. Tasks often start on one executor and end on another (an accept loop or a
/// spawning main task on executor 0, its tasks stolen or woken elsewhere): before this list,
/// the stacks they freed stayed with the executor where they ended, which started few tasks,
/// while the one that started them mapped new stacks without end (36,864 stacks mapped by a
/// test that never had more than 100 tasks alive, 100,000 in all).
pub const Shared = struct {
    lock: SpinLock = .{},
    /// Linked through the stacks' `FreeLink`s, like a pool's free list.
    head: ?[*]align(page_size) u8 = null,
    /// Stacks on the list; written under `lock`, read without it for a peek.
    count: std.atomic.Value(usize) = .init(0),
    /// Which of the list's stacks have been idle a whole period. Under `lock`; rolled by
    /// whichever pool sweeps first in a period (`Pool.trim`), so that several executors
    /// sweeping in turn do not each restart it.
    idle: IdleMark = .{},
    /// Stacks whose pages were given back (`Pool.trim`): uncommitted again, like a new slab's.
    /// An array, not a list linked through the stacks: a link would commit a page of each.
    /// Its capacity covers every stack the runtime's pools mapped (`mapped`), reserved by
    /// `Pool.grow`, so that a sweep never allocates. Under `lock`.
    trimmed: std.ArrayList([*]align(page_size) u8) = .empty,
    /// `trimmed.items.len`, for a peek without the lock and for `weft.Metrics`.
    trimmed_count: std.atomic.Value(usize) = .init(0),
    /// Stacks mapped by all the pools that share this list. Under `lock`.
    mapped: usize = 0,

    /// `gpa`: the pools' allocator. After every pool's `deinit`.
    pub fn deinit(shared: *Shared, gpa: std.mem.Allocator) void {
        shared.trimmed.deinit(gpa);
        shared.* = undefined;
    }
};

/// Which stacks at the bottom of a free list (most recent first) no acquire took for a whole
/// period: a list that never held fewer than `low` stacks since the period began has not
/// handed out its `low` bottom ones. A low-water mark costs an acquire one compare; a time
/// stamp per stack would cost a clock read per release. Rejected too: giving back every free
/// stack past the hot set at each sweep, which would fault the pages of a steady load's
/// stacks back in every second.
pub const IdleMark = struct {
    /// The fewest stacks the list held since `period_start_ns`.
    low: usize = 0,
    /// Bottom stacks idle through the whole previous period and still there, not given back.
    idle: usize = 0,
    period_start_ns: u64 = 0,

    /// After stacks were taken from the top of the list, which now holds `count`.
    fn taken(mark: *IdleMark, count: usize) void {
        if (count < mark.low) mark.low = count;
        if (count < mark.idle) mark.idle = count;
    }

    /// After `count` stacks left the bottom of the list (a spill).
    fn cutBottom(mark: *IdleMark, count: usize) void {
        mark.low -|= count;
        mark.idle -|= count;
    }

    /// Starts a new period if `config.stack_idle_ns` passed since this one began: the stacks
    /// below the mark become idle ones.
    fn roll(mark: *IdleMark, count: usize, now_ns: u64) void {
        assert(mark.idle <= mark.low);
        assert(mark.low <= count);
        if (now_ns -| mark.period_start_ns < config.stack_idle_ns) return;
        mark.idle = mark.low;
        mark.low = count;
        mark.period_start_ns = now_ns;
    }

    /// After `count` idle stacks, the topmost of the idle ones, left the list to be trimmed.
    fn gaveBack(mark: *IdleMark, count: usize) void {
        assert(count <= mark.idle);
        mark.idle -= count;
        mark.low -= count;
    }
};

/// What one `Pool.trim` did.
pub const Trim = struct {
    /// Stacks whose pages went back to the kernel.
    stacks: usize = 0,
    /// It stopped at `config.stack_trim_batch_max` with idle stacks left: sweep again soon.
    cut_short: bool = false,
};

/// A pool of stacks owned by one executor: not thread-safe; the `Shared` list it may spill to
/// and refill from has its own lock.
///
/// A stack may come back to another executor's pool than the one that mapped it (a fiber that
/// migrated ends elsewhere); it simply joins that pool's free list, since all pools of a
/// runtime hand out stacks of one size and every slab is unmapped only when the runtime ends,
/// and past `config.pool_free_max` free stacks goes on to the shared list. So the free list
/// is intrusive (the link lives in the released stack's top word, a page the fiber already
/// committed) and needs no capacity reserved per slab.
pub const Pool = struct {
    gpa: std.mem.Allocator,
    stack_size_bytes: usize,
    guard: Guard,
    /// Stacks per slab mapping: `config.slab_stacks`, or fewer where an address-space limit
    /// leaves less room (`plan`). Set before the first `acquire`.
    slab_stacks: usize = config.slab_stacks,
    /// Which of `free_head`'s stacks have been idle a period, for `trim`. Owner only.
    free_idle: IdleMark = .{},
    /// The runtime's shared free list; null for a pool on its own.
    shared: ?*Shared = null,
    /// Stacks on `free_head`'s list. Written by the pool's owner only; atomic so that
    /// `weft.Metrics` may read it from any thread (`idleStacks`).
    free_count: std.atomic.Value(usize) = .init(0),
    /// Set when `MADV_GUARD_INSTALL` is unavailable and guards are `mprotect`ed instead.
    guard_splits_mappings: bool = false,
    /// Set when `process_madvise` cannot install guards, so they go one `madvise` at a time.
    guard_batch_unsupported: bool = false,
    /// Released stacks, most recent first (warm in the cache), linked through `FreeLink`.
    free_head: ?[*]align(page_size) u8 = null,
    /// Stacks of the newest slab never handed out yet, taken from the top of the slab down
    /// so that the slab is touched from its top first; none of their pages is committed.
    fresh: []align(page_size) u8 = &.{},
    /// `fresh`'s stacks, for `idleStacks`, as `free_count`.
    fresh_count: std.atomic.Value(usize) = .init(0),
    /// Appended by the pool's owner in `grow`, under `slabs_lock`, which `committedBytes`
    /// takes from any thread to read one slab (the list's buffer moves when it grows).
    slabs: std.ArrayList([]align(page_size) u8) = .empty,
    slabs_lock: SpinLock = .{},
    /// Set once the failure to map more stacks has been logged, so it is logged once.
    logged_exhaustion: bool = false,
    /// For `weft.Metrics`, written by the pool's owner. A stack may be acquired from one pool
    /// and released to another: only the sums over a runtime's pools tell how many are in use
    /// (mapped, less idle, less those on the shared list). The idle counts are the pool's own
    /// bookkeeping, so counting costs nothing per acquire or release.
    counters: Counters = .{},

    pub const Counters = struct {
        /// Stacks in the slabs this pool mapped.
        mapped: Counter = .{},
    };

    /// Written at the top of a released stack.
    const FreeLink = struct { next: ?[*]align(page_size) u8 };

    /// `shared`: the free list this pool's runtime shares among its pools (see `Shared`), or
    /// null for a pool on its own.
    pub fn init(
        gpa: std.mem.Allocator,
        stack_size_bytes: usize,
        guard: Guard,
        shared: ?*Shared,
    ) Pool {
        assert(stack_size_bytes % page_size == 0);
        assert(stack_size_bytes >= config.stack_size_bytes_min);
        return .{
            .gpa = gpa,
            .stack_size_bytes = stack_size_bytes,
            .guard = guard,
            .shared = shared,
        };
    }

    /// Unmaps this pool's slabs. Every pool of the runtime must be done handing out stacks:
    /// a free list may link stacks of another pool's slabs.
    pub fn deinit(pool: *Pool) void {
        for (pool.slabs.items) |slab| host.unmap(slab);
        pool.slabs.deinit(pool.gpa);
        pool.* = undefined;
    }

    /// Bytes of this pool's slabs that the kernel backs: the deepest each stack has been, in
    /// pages, summed (a stack keeps its pages when it is freed and reused). Safe from any
    /// thread while the pool lives; costs a page-table walk of every slab (`os.Residency`).
    pub fn committedBytes(pool: *Pool, residency: *os.Residency) u64 {
        var committed: u64 = 0;
        var index: usize = 0;
        while (pool.slabAt(index)) |slab| : (index += 1) {
            committed += residency.bytes(slab);
        }
        return committed;
    }

    fn slabAt(pool: *Pool, index: usize) ?[]align(page_size) u8 {
        pool.slabs_lock.lock();
        defer pool.slabs_lock.unlock();
        return if (index < pool.slabs.items.len) pool.slabs.items[index] else null;
    }

    /// Stacks this pool has mapped (handed out, free, trimmed or fresh).
    pub fn mapped(pool: *const Pool) usize {
        return pool.slabs.items.len * pool.slab_stacks;
    }

    /// Stacks this pool holds and has not handed out (free or fresh). Any thread; a value
    /// from some recent moment.
    pub fn idleStacks(pool: *const Pool) usize {
        return pool.free_count.load(.monotonic) + pool.fresh_count.load(.monotonic);
    }

    fn setFreeCount(pool: *Pool, count: usize) void {
        pool.free_count.store(count, .monotonic);
    }

    pub fn acquire(pool: *Pool) AcquireError!Stack {
        if (pool.free_head == null) pool.refill();
        if (pool.free_head) |base| {
            assert(pool.free_count.raw > 0);
            const stack: Stack = .{ .memory = base[0..pool.stack_size_bytes] };
            pool.free_head = linkOf(stack).next;
            pool.setFreeCount(pool.free_count.raw - 1);
            pool.free_idle.taken(pool.free_count.raw);
            return stack;
        }
        assert(pool.free_count.raw == 0);
        if (pool.fresh.len == 0) try pool.grow();
        assert(pool.fresh.len >= pool.stack_size_bytes);
        const offset = pool.fresh.len - pool.stack_size_bytes;
        const stack: Stack = .{ .memory = @alignCast(pool.fresh[offset..]) };
        pool.fresh = pool.fresh[0..offset];
        pool.fresh_count.store(pool.fresh_count.raw - 1, .monotonic);
        assert(pool.fresh_count.raw == pool.fresh.len / pool.stack_size_bytes);
        return stack;
    }

    /// Takes back a stack from this pool or from another pool of the same runtime.
    pub fn release(pool: *Pool, stack: Stack) void {
        assert(stack.memory.len == pool.stack_size_bytes);
        linkOf(stack).* = .{ .next = pool.free_head };
        pool.free_head = stack.memory.ptr;
        pool.setFreeCount(pool.free_count.raw + 1);
        if (pool.free_count.raw > config.pool_free_max) pool.spill();
    }

    /// Hands the `config.pool_spill_stacks` least recently freed stacks to the shared list;
    /// the most recently freed, warm in this CPU's cache, stay here.
    fn spill(pool: *Pool) void {
        const shared = pool.shared orelse return;
        assert(pool.free_count.raw > config.pool_spill_stacks);
        // Keep the warmest stacks: skip to the last one kept, cut the batch after it.
        var last_kept = pool.free_head.?;
        for (1..pool.free_count.raw - config.pool_spill_stacks) |_| {
            last_kept = pool.linkAt(last_kept).next.?;
        }
        const first = pool.linkAt(last_kept).next.?;
        pool.linkAt(last_kept).next = null;
        var last = first;
        while (pool.linkAt(last).next) |next| last = next;
        pool.setFreeCount(pool.free_count.raw - config.pool_spill_stacks);
        pool.free_idle.cutBottom(config.pool_spill_stacks);

        shared.lock.lock();
        defer shared.lock.unlock();
        pool.linkAt(last).next = shared.head;
        shared.head = first;
        shared.count.store(shared.count.load(.monotonic) + config.pool_spill_stacks, .monotonic);
    }

    /// Takes up to `config.pool_spill_stacks` stacks from the shared list, or failing that
    /// from the trimmed stacks, for a pool whose own list is empty.
    fn refill(pool: *Pool) void {
        assert(pool.free_head == null and pool.free_count.raw == 0);
        const shared = pool.shared orelse return;
        // A racy peek: an empty shared list is the common case, and costs no lock.
        if (shared.count.load(.monotonic) == 0) {
            if (shared.trimmed_count.load(.monotonic) == 0) return;
            return pool.refillTrimmed(shared);
        }
        shared.lock.lock();
        defer shared.lock.unlock();
        const first = shared.head orelse return;
        var last = first;
        var taken: usize = 1;
        while (taken < config.pool_spill_stacks) : (taken += 1) {
            last = pool.linkAt(last).next orelse break;
        }
        shared.head = pool.linkAt(last).next;
        shared.count.store(shared.count.load(.monotonic) - taken, .monotonic);
        shared.idle.taken(shared.count.raw);
        pool.linkAt(last).next = null;
        pool.free_head = first;
        pool.setFreeCount(taken);
    }

    /// Takes up to `config.pool_spill_stacks` trimmed stacks onto this pool's empty list.
    /// Linking them commits their top page, which the task that gets each touches first.
    fn refillTrimmed(pool: *Pool, shared: *Shared) void {
        assert(pool.free_head == null and pool.free_count.raw == 0);
        shared.lock.lock();
        defer shared.lock.unlock();
        const trimmed = &shared.trimmed.items;
        const taken = @min(trimmed.len, config.pool_spill_stacks);
        for (trimmed.*[trimmed.len - taken ..]) |base| {
            pool.linkAt(base).* = .{ .next = pool.free_head };
            pool.free_head = base;
        }
        trimmed.len -= taken;
        shared.trimmed_count.store(trimmed.len, .monotonic);
        pool.setFreeCount(taken);
        // New on the list: not idle. The list was empty, so the mark is already 0.
        assert(pool.free_idle.low == 0);
    }

    /// Gives back the pages of free stacks that no acquire took for a whole period (see
    /// `IdleMark`, `config.stack_idle_ns`): first from this pool's list, past its
    /// `config.pool_hot_stacks` most recent, then from the shared list; at most
    /// `config.stack_trim_batch_max` in all, the rest at the next call. Owner only, from the
    /// executor's poll (`Executor.sweepStacks`), never from an acquire or a release. The
    /// stacks go to the shared trimmed array; a pool on its own gives nothing back.
    pub fn trim(pool: *Pool, now_ns: u64) Trim {
        const shared = pool.shared orelse return .{};
        var bases: [config.stack_trim_batch_max][*]align(page_size) u8 = undefined;
        pool.free_idle.roll(pool.free_count.raw, now_ns);
        const hot = config.pool_hot_stacks;
        const own_idle = @min(pool.free_idle.idle, pool.free_count.raw -| hot);
        const own = @min(own_idle, bases.len);
        if (own > 0) {
            const skip = pool.free_count.raw - own_idle;
            const first = pool.detach(&pool.free_head, pool.free_count.raw, skip, own);
            pool.setFreeCount(pool.free_count.raw - own);
            pool.free_idle.gaveBack(own);
            pool.collect(first, bases[0..own]);
        }
        const from_shared = pool.detachShared(shared, now_ns, bases[own..]);
        const count = own + from_shared.stacks;
        for (bases[0..count]) |base| {
            // The guard page (or the unguarded margin) was never committed: leave it alone.
            host.adviseDontNeed(@alignCast(base[page_size..pool.stack_size_bytes]));
        }
        if (count > 0) {
            shared.lock.lock();
            defer shared.lock.unlock();
            // Room for every stack mapped was reserved (`reserveTrimmed`).
            assert(shared.trimmed.items.len + count <= shared.mapped);
            shared.trimmed.appendSliceAssumeCapacity(bases[0..count]);
            shared.trimmed_count.store(shared.trimmed.items.len, .monotonic);
        }
        return .{ .stacks = count, .cut_short = own < own_idle or from_shared.cut_short };
    }

    /// Whether a sweep may find stacks to give back: more free stacks than the hot set here,
    /// or any on the shared list. A racy peek, for an executor about to sleep: it sleeps no
    /// longer than its next sweep only then, so that an idle runtime wakes for nothing.
    pub fn mayTrim(pool: *const Pool) bool {
        const shared = pool.shared orelse return false;
        if (pool.free_count.raw > config.pool_hot_stacks) return true;
        return shared.count.load(.monotonic) > 0;
    }

    /// Under the shared lock: detaches the shared list's idle stacks, as many as `bases`
    /// holds, and writes their bases there.
    fn detachShared(
        pool: *Pool,
        shared: *Shared,
        now_ns: u64,
        bases: [][*]align(page_size) u8,
    ) Trim {
        // A racy peek: an empty shared list is the common case, and costs no lock.
        if (shared.count.load(.monotonic) == 0) return .{};
        shared.lock.lock();
        defer shared.lock.unlock();
        const count = shared.count.raw;
        shared.idle.roll(count, now_ns);
        const idle = shared.idle.idle;
        const taken = @min(idle, bases.len);
        if (taken == 0) return .{};
        const first = pool.detach(&shared.head, count, count - idle, taken);
        shared.count.store(count - taken, .monotonic);
        shared.idle.gaveBack(taken);
        pool.collect(first, bases[0..taken]);
        return .{ .stacks = taken, .cut_short = taken < idle };
    }

    /// Detaches `take` stacks of the list at `head`, which holds `count`, after its first
    /// `skip`; returns the first of them, the last linked to null.
    fn detach(
        pool: *const Pool,
        head: *?[*]align(page_size) u8,
        count: usize,
        skip: usize,
        take: usize,
    ) [*]align(page_size) u8 {
        assert(take > 0);
        assert(skip + take <= count);
        var before: ?[*]align(page_size) u8 = null;
        var first = head.*.?;
        for (0..skip) |_| {
            before = first;
            first = pool.linkAt(first).next.?;
        }
        var last = first;
        for (1..take) |_| last = pool.linkAt(last).next.?;
        const after = pool.linkAt(last).next;
        pool.linkAt(last).next = null;
        if (before) |kept| pool.linkAt(kept).next = after else head.* = after;
        return first;
    }

    /// Writes the bases of the list from `first` to `bases`, which it fills exactly. Before
    /// any of them is given back: the links live in the pages that go.
    fn collect(
        pool: *const Pool,
        first: [*]align(page_size) u8,
        bases: [][*]align(page_size) u8,
    ) void {
        var next: ?[*]align(page_size) u8 = first;
        for (bases) |*base| {
            base.* = next.?;
            next = pool.linkAt(base.*).next;
        }
        assert(next == null);
    }

    fn linkAt(pool: *const Pool, base: [*]align(page_size) u8) *FreeLink {
        return linkOf(.{ .memory = base[0..pool.stack_size_bytes] });
    }

    fn linkOf(stack: Stack) *FreeLink {
        return @ptrFromInt(stack.top() - @sizeOf(FreeLink));
    }

    fn grow(pool: *Pool) AcquireError!void {
        assert(pool.fresh.len == 0);
        assert(pool.slab_stacks >= 1 and pool.slab_stacks <= config.slab_stacks);
        const slab_len = pool.stack_size_bytes * pool.slab_stacks;
        {
            pool.slabs_lock.lock();
            defer pool.slabs_lock.unlock();
            pool.slabs.ensureUnusedCapacity(pool.gpa, 1) catch return error.SystemResources;
        }
        try pool.reserveTrimmed();

        const slab_ptr = host.mapAnonymous(slab_len) catch |err| {
            pool.logExhaustion(err);
            return error.SystemResources;
        };
        const slab = slab_ptr[0..slab_len];
        errdefer host.unmap(slab);
        host.adviseNoHugePages(slab);
        if (pool.guard == .page) pool.installGuards(slab) catch |err| {
            pool.logExhaustion(err);
            return error.SystemResources;
        };
        {
            pool.slabs_lock.lock();
            defer pool.slabs_lock.unlock();
            pool.slabs.appendAssumeCapacity(slab);
        }
        pool.fresh = slab;
        pool.fresh_count.store(pool.slab_stacks, .monotonic);
        pool.counters.mapped.add(pool.slab_stacks);
    }

    /// Makes room on the shared trimmed array for every stack of one more slab, so that a
    /// sweep never allocates. Under the shared lock: an allocation there is rare (one per
    /// slab) and racing it with sweeps would need a second lock.
    fn reserveTrimmed(pool: *Pool) AcquireError!void {
        const shared = pool.shared orelse return;
        shared.lock.lock();
        defer shared.lock.unlock();
        const capacity = shared.mapped + pool.slab_stacks;
        shared.trimmed.ensureTotalCapacity(pool.gpa, capacity) catch
            return error.SystemResources;
        // Counted before the map succeeds: a failed one leaves room unused, never too little.
        shared.mapped = capacity;
    }

    /// Installs the guard page at the bottom of every stack of `slab`.
    fn installGuards(
        pool: *Pool,
        slab: []align(page_size) u8,
    ) (AcquireError || error{Unexpected})!void {
        assert(pool.guard == .page);
        assert(slab.len == pool.stack_size_bytes * pool.slab_stacks);
        const batch = !pool.guard_splits_mappings and !pool.guard_batch_unsupported;
        if (builtin.os.tag == .linux and batch) { // see installGuard
            var guards_buffer: [config.slab_stacks]os.IoVec = undefined;
            const guards = guards_buffer[0..pool.slab_stacks];
            for (guards, 0..) |*guard, index| {
                guard.* = .{ .base = slab.ptr + index * pool.stack_size_bytes, .len = page_size };
            }
            if (os.adviseGuardBatch(guards)) |_| return else |err| switch (err) {
                error.Unsupported => pool.guard_batch_unsupported = true,
                error.SystemResources => return error.SystemResources,
            }
        }
        var index: usize = 0;
        while (index < pool.slab_stacks) : (index += 1) {
            try pool.installGuard(@alignCast(slab[index * pool.stack_size_bytes ..][0..page_size]));
        }
    }

    fn installGuard(
        pool: *Pool,
        page: []align(page_size) u8,
    ) (AcquireError || error{Unexpected})!void {
        assert(page.len == page_size);
        // Guard markers are Linux's; elsewhere a guard is a PROT_NONE page.
        if (builtin.os.tag == .linux and !pool.guard_splits_mappings) {
            const rc = linux.madvise(page.ptr, page_size, os.madv_guard_install);
            switch (os.errno(rc)) {
                .SUCCESS => return,
                // Kernel older than 6.13: fall back to a PROT_NONE page.
                .INVAL, .NOSYS => pool.guard_splits_mappings = true,
                .NOMEM, .AGAIN => return error.SystemResources,
                else => |e| return os.unexpectedErrno(e),
            }
        }
        host.protectNone(page) catch |err| switch (err) {
            error.SystemResources => return error.SystemResources,
            error.Unexpected => return error.Unexpected,
        };
    }

    fn logExhaustion(pool: *Pool, err: anyerror) void {
        if (pool.logged_exhaustion) return;
        pool.logged_exhaustion = true;
        const max_map_count = if (builtin.os.tag == .linux) os.maxMapCount() orelse 0 else 0;
        if (pool.guard_splits_mappings) {
            log.warn("weft: cannot map more fiber stacks after {d} ({t}). Guard pages need " ++
                "two mappings per stack on this kernel (no MADV_GUARD_INSTALL) and " ++
                "vm.max_map_count is {d}: raise it (sysctl -w vm.max_map_count=N) or use " ++
                ".stack_guard = .none. New tasks get error.ConcurrencyUnavailable.", .{
                pool.mapped(), err, max_map_count,
            });
        } else {
            log.warn("weft: cannot map more fiber stacks after {d} ({t}): out of memory " ++
                "or address space; lower .stack_size_bytes. New tasks get " ++
                "error.ConcurrencyUnavailable.", .{ pool.mapped(), err });
        }
    }
};

fn overflowDetected(stack: Stack, address: usize) noreturn {
    @branchHint(.cold);
    std.debug.panic("weft: fiber stack overflow detected (stack pointer 0x{x}, stack at 0x{x}, " ++
        "{d} bytes, no guard page): raise .stack_size_bytes or use .stack_guard = .page", .{
        address, @intFromPtr(stack.memory.ptr), stack.memory.len,
    });
}

/// For unguarded stacks: panics when `address`, the stack pointer of the fiber switching away,
/// has reached the stack's lowest page. Called on every switch away from a fiber.
pub inline fn checkDepth(stack: Stack, guard: Guard, address: usize) void {
    if (guard == .none and !stack.contains(address)) overflowDetected(stack, address);
}

/// Why a test of Linux's calls (mincore, the residency scan, RLIMIT_AS and cgroups) is skipped
/// elsewhere.
const linux_only = "it checks Linux's own calls (mincore, page tables, rlimits, cgroups)";

test "Pool: stacks are reused and one slab serves many stacks" {
    var pool: Pool = .init(std.testing.allocator, 64 * 1024, .page, null);
    defer pool.deinit();
    const a = try pool.acquire();
    const b = try pool.acquire();
    try std.testing.expect(a.memory.ptr != b.memory.ptr);
    try std.testing.expectEqual(@as(usize, 1), pool.slabs.items.len);
    // The top of a stack is writable.
    const top_word: *volatile u64 = @ptrFromInt(a.top() - 8);
    top_word.* = 42;
    pool.release(a);
    const c = try pool.acquire();
    try std.testing.expectEqual(a.memory.ptr, c.memory.ptr);
    pool.release(b);
    pool.release(c);
    // Released stacks come back most recent first, from another pool too.
    var other: Pool = .init(std.testing.allocator, 64 * 1024, .page, null);
    defer other.deinit();
    const d = try other.acquire();
    pool.release(d);
    try std.testing.expectEqual(d.memory.ptr, (try pool.acquire()).memory.ptr);
    try std.testing.expectEqual(c.memory.ptr, (try pool.acquire()).memory.ptr);
    try std.testing.expectEqual(@as(usize, config.slab_stacks), pool.mapped());
}

test "Pool: unguarded stacks commit no page until used; depth check bounds" {
    if (builtin.os.tag != .linux) return host.skipTest(@src(), linux_only);
    var pool: Pool = .init(std.testing.allocator, 16 * 1024, .none, null);
    defer pool.deinit();
    const a = try pool.acquire();
    // Creating a dense slab touches none of its pages.
    var residency: [4]u8 = undefined;
    const mincore_rc = linux.mincore(a.memory.ptr, a.memory.len, &residency);
    try std.testing.expectEqual(@as(usize, 0), mincore_rc);
    for (residency) |page| try std.testing.expectEqual(@as(u8, 0), page & 1);
    try std.testing.expect(a.contains(a.top() - 64));
    try std.testing.expect(a.contains(@intFromPtr(a.memory.ptr) + page_size));
    try std.testing.expect(!a.contains(@intFromPtr(a.memory.ptr) + page_size - 8));
    pool.release(a);
}

test "Pool: committed bytes count the pages the stacks touched, with the scan and without" {
    if (builtin.os.tag != .linux) return host.skipTest(@src(), linux_only);
    var pool: Pool = .init(std.testing.allocator, 64 * 1024, .page, null);
    defer pool.deinit();
    const untouched = try pool.acquire();
    const shallow = try pool.acquire();
    const deep = try pool.acquire();
    // A fresh slab: nothing committed, its guards included.
    var scan: os.Residency = .open();
    defer scan.close();
    var fallback: os.Residency = .withoutScan();
    defer fallback.close();
    try std.testing.expectEqual(@as(u64, 0), pool.committedBytes(&scan));
    try std.testing.expectEqual(@as(u64, 0), pool.committedBytes(&fallback));

    const shallow_top: *volatile u8 = @ptrFromInt(shallow.top() - 1);
    shallow_top.* = 1;
    for (0..3) |page| {
        const byte: *volatile u8 = @ptrFromInt(deep.top() - page * page_size - 1);
        byte.* = 1;
    }
    try std.testing.expectEqual(@as(u64, 4 * page_size), pool.committedBytes(&scan));
    try std.testing.expectEqual(@as(u64, 4 * page_size), pool.committedBytes(&fallback));
    // Released stacks keep their pages; the free list's link lies in a page already touched.
    pool.release(shallow);
    pool.release(deep);
    try std.testing.expectEqual(@as(u64, 4 * page_size), pool.committedBytes(&scan));
    pool.release(untouched);
    try std.testing.expectEqual(@as(u64, 5 * page_size), pool.committedBytes(&scan));
}

test "Pool: stacks freed past the limit go to the shared list, and come back before a new slab" {
    var shared: Shared = .{};
    defer shared.deinit(std.testing.allocator);
    var starter: Pool = .init(std.testing.allocator, 16 * 1024, .none, &shared);
    defer starter.deinit();
    var ender: Pool = .init(std.testing.allocator, 16 * 1024, .none, &shared);
    defer ender.deinit();
    // Tasks start on `starter` and end on `ender`, a few alive at a time, many times over:
    // the stacks must go round, not pile up in `ender`.
    var alive: [8]Stack = undefined;
    for (0..100) |_| {
        for (&alive) |*stack| stack.* = try starter.acquire();
        for (alive) |stack| ender.release(stack);
        try std.testing.expect(ender.free_count.raw <= config.pool_free_max);
    }
    try std.testing.expectEqual(@as(usize, 0), ender.mapped());
    // 800 stacks acquired, at most 8 alive: one slab, and the ones `ender` keeps past it.
    try std.testing.expectEqual(@as(usize, config.slab_stacks), starter.mapped());
    const on_lists = starter.free_count.raw + ender.free_count.raw + shared.count.raw;
    const fresh_stacks = starter.fresh.len / starter.stack_size_bytes;
    try std.testing.expectEqual(@as(usize, config.slab_stacks) - fresh_stacks, on_lists);
    // What weft.Metrics reads: every stack mapped is idle in a pool or shared, none in use.
    const idle = starter.idleStacks() + ender.idleStacks() + shared.count.raw;
    try std.testing.expectEqual(starter.mapped() + ender.mapped(), idle);
    // A spill keeps the warmest: the stack released last comes back first.
    const last = alive[alive.len - 1];
    try std.testing.expectEqual(last.memory.ptr, (try ender.acquire()).memory.ptr);
}

test "Pool: a refill takes at most one batch and leaves the rest shared" {
    var shared: Shared = .{};
    defer shared.deinit(std.testing.allocator);
    var a: Pool = .init(std.testing.allocator, 16 * 1024, .none, &shared);
    defer a.deinit();
    var b: Pool = .init(std.testing.allocator, 16 * 1024, .none, &shared);
    defer b.deinit();
    const count = config.pool_free_max + 2 * config.pool_spill_stacks;
    var stacks: [count]Stack = undefined;
    for (&stacks) |*stack| stack.* = try a.acquire();
    for (stacks) |stack| b.release(stack);
    const spilled = shared.count.load(.monotonic);
    try std.testing.expectEqual(@as(usize, 2 * config.pool_spill_stacks), spilled);
    try std.testing.expectEqual(@as(usize, config.pool_free_max), b.free_count.raw);
    // `a` has fresh stacks of its slab left, but its free list is empty: it takes a batch
    // from the shared list first (freed stacks are committed; fresh ones are not yet).
    const mapped = a.mapped();
    const fresh = a.fresh.len;
    _ = try a.acquire();
    try std.testing.expectEqual(fresh, a.fresh.len);
    try std.testing.expectEqual(mapped, a.mapped());
    try std.testing.expectEqual(@as(usize, config.pool_spill_stacks - 1), a.free_count.raw);
    const spilled_left = shared.count.load(.monotonic);
    try std.testing.expectEqual(@as(usize, config.pool_spill_stacks), spilled_left);
}

/// Touches `pages` pages of `stack` from its top, as a fiber running that deep would.
fn touchPages(stack: Stack, pages: usize) void {
    for (0..pages) |page| {
        const byte: *volatile u8 = @ptrFromInt(stack.top() - page * page_size - 1);
        byte.* = 1;
    }
}

test "Pool: stacks idle a whole period give their pages back, past the hot set" {
    if (builtin.os.tag != .linux) return host.skipTest(@src(), linux_only);
    var shared: Shared = .{};
    defer shared.deinit(std.testing.allocator);
    var pool: Pool = .init(std.testing.allocator, 16 * 1024, .page, &shared);
    defer pool.deinit();
    var scan: os.Residency = .open();
    defer scan.close();
    // A spike: 600 stacks three pages deep, then all freed (past `pool_free_max` to the
    // shared list).
    var stacks: [600]Stack = undefined;
    for (&stacks) |*stack| {
        stack.* = try pool.acquire();
        touchPages(stack.*, 3);
    }
    for (stacks) |stack| pool.release(stack);
    const spike_bytes = pool.committedBytes(&scan);
    try std.testing.expectEqual(@as(u64, 600 * 3 * page_size), spike_bytes);
    // The first sweep starts a period; the stacks become idle ones only at the next.
    const period = config.stack_idle_ns;
    try std.testing.expectEqual(@as(usize, 0), pool.trim(period).stacks);
    // A stack taken and given back during the period: the list's top, not idle.
    pool.release(try pool.acquire());
    // Then each sweep gives back at most a batch, the last not cut short.
    var given: usize = 0;
    var sweeps: usize = 0;
    while (true) : (sweeps += 1) {
        const trimmed = pool.trim(2 * period + sweeps);
        given += trimmed.stacks;
        if (!trimmed.cut_short) break;
    }
    try std.testing.expectEqual(@as(usize, 600 - config.pool_hot_stacks), given);
    const given_max = config.stack_trim_batch_max;
    try std.testing.expectEqual((given + given_max - 1) / given_max, sweeps + 1);
    try std.testing.expectEqual(@as(usize, config.pool_hot_stacks), pool.free_count.raw);
    try std.testing.expectEqual(given, shared.trimmed_count.raw);
    try std.testing.expect(!pool.mayTrim());
    const kept_bytes = pool.committedBytes(&scan);
    try std.testing.expectEqual(@as(u64, config.pool_hot_stacks * 3 * page_size), kept_bytes);
    // Trimmed stacks come back before a new slab, zeroed, their guards in place.
    const mapped = pool.mapped();
    for (&stacks) |*stack| {
        stack.* = try pool.acquire();
        const bottom: *volatile u8 = @ptrFromInt(stack.top() - 2 * page_size - 1);
        try std.testing.expect(bottom.* == 0 or bottom.* == 1); // hot ones keep theirs
        touchPages(stack.*, 3);
    }
    try std.testing.expectEqual(mapped, pool.mapped());
    try std.testing.expectEqual(@as(usize, 0), shared.trimmed_count.raw);
    for (stacks) |stack| pool.release(stack);
}

test "Pool: a stack taken during the period is not given back" {
    var shared: Shared = .{};
    defer shared.deinit(std.testing.allocator);
    var pool: Pool = .init(std.testing.allocator, 16 * 1024, .none, &shared);
    defer pool.deinit();
    var stacks: [config.pool_hot_stacks + 8]Stack = undefined;
    for (&stacks) |*stack| stack.* = try pool.acquire();
    for (stacks) |stack| pool.release(stack);
    const period = config.stack_idle_ns;
    _ = pool.trim(period);
    // Taken down to 4 free stacks and back: only those 4, at the bottom, stayed idle.
    for (stacks[4..]) |*stack| stack.* = try pool.acquire();
    for (stacks[4..]) |stack| pool.release(stack);
    try std.testing.expectEqual(@as(usize, 4), pool.trim(2 * period).stacks);
    // A period untouched: everything past the hot set goes.
    try std.testing.expectEqual(@as(usize, 4), pool.trim(3 * period).stacks);
    try std.testing.expectEqual(@as(usize, 8), shared.trimmed_count.raw);
    try std.testing.expectEqual(@as(usize, config.pool_hot_stacks), pool.free_count.raw);
}

test "plan: the stacks and the task ceiling fit RLIMIT_AS and memory.max; none fit is named" {
    if (builtin.os.tag != .linux) return host.skipTest(@src(), linux_only);
    const mib = 1024 * 1024;
    const none = try plan(.none, mib, 2, 1 << 22, 64);
    try std.testing.expectEqual(@as(usize, config.slab_stacks), none.slab_stacks);
    try std.testing.expectEqual(@as(usize, 1 << 22), none.tasks_max);
    // `ulimit -v 2G`, 100 MiB mapped: about 1,880 stacks of 1 MiB, in slabs of 117 for two
    // executors, not 256 (which left 1,536).
    var limits: memory_limits.Limits = .none;
    limits.address_space_bytes = 2048 * mib;
    limits.address_space_used_bytes = 100 * mib;
    const two_gib = try plan(limits, mib, 2, 1 << 22, 64);
    const room = (2048 - 100) * mib - config.address_space_reserve_bytes;
    try std.testing.expectEqual(room / (mib + 64), two_gib.tasks_max);
    try std.testing.expectEqual(two_gib.tasks_max / 16, two_gib.slab_stacks);
    // Smaller stacks, more of them; the option still caps.
    const small = try plan(limits, 64 * 1024, 2, 1000, 64);
    try std.testing.expectEqual(@as(usize, 1000), small.tasks_max);
    try std.testing.expectEqual(@as(usize, config.slab_stacks), small.slab_stacks);
    // Under 300 MB with 250 MiB mapped, no 1 MiB stack fits beside the reserve.
    limits.address_space_bytes = 300 * 1000 * 1000;
    limits.address_space_used_bytes = 250 * mib;
    try std.testing.expectError(error.AddressSpaceLimit, plan(limits, mib, 1, 1 << 22, 64));
    // memory.max 64 MiB, 8 MiB in use: (56 / 2) MiB of tasks' minimum.
    limits = .none;
    limits.cgroup_memory_bytes = 64 * mib;
    limits.cgroup_memory_used_bytes = 8 * mib;
    const cgroup = try plan(limits, mib, 4, 1 << 22, 64);
    const task_bytes = config.task_committed_bytes_min + mib / 512;
    try std.testing.expectEqual(28 * mib / task_bytes, cgroup.tasks_max);
    try std.testing.expectEqual(@as(usize, config.slab_stacks), cgroup.slab_stacks);
    limits.cgroup_memory_used_bytes = 64 * mib;
    try std.testing.expectError(error.MemoryLimit, plan(limits, mib, 1, 1 << 22, 64));
}
