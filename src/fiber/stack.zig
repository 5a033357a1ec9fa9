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
//! Slabs are marked `MADV_NOHUGEPAGE`: with transparent huge pages set to `always`, the kernel
//! would otherwise back the first touch of a 2 MiB range with a huge page shared by eight
//! mostly-idle stacks, or stall in compaction trying to.
const std = @import("std");
const linux = std.os.linux;
const assert = std.debug.assert;
const config = @import("../config.zig");
const os = @import("../os/linux.zig");

const SpinLock = @import("../os/SpinLock.zig");
const Counter = @import("../os/Counter.zig");

const page_size = std.heap.page_size_min;
const log = std.log.scoped(.weft);

pub const Guard = enum {
    /// A guard page below every stack; an overflow faults. The default.
    page,
    /// No guard page; the stack pointer is checked against the stack's lowest page at every
    /// switch away. Denser and cheaper to create; see the trade-off above.
    none,
};

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
        for (pool.slabs.items) |slab| os.unmap(slab);
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

    /// Stacks this pool has mapped (handed out, free or fresh).
    pub fn mapped(pool: *const Pool) usize {
        return pool.slabs.items.len * config.slab_stacks;
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

        shared.lock.lock();
        defer shared.lock.unlock();
        pool.linkAt(last).next = shared.head;
        shared.head = first;
        shared.count.store(shared.count.load(.monotonic) + config.pool_spill_stacks, .monotonic);
    }

    /// Takes up to `config.pool_spill_stacks` stacks from the shared list, for a pool whose
    /// own list is empty.
    fn refill(pool: *Pool) void {
        assert(pool.free_head == null and pool.free_count.raw == 0);
        const shared = pool.shared orelse return;
        // A racy peek: an empty shared list is the common case, and costs no lock.
        if (shared.count.load(.monotonic) == 0) return;
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
        pool.linkAt(last).next = null;
        pool.free_head = first;
        pool.setFreeCount(taken);
    }

    fn linkAt(pool: *const Pool, base: [*]align(page_size) u8) *FreeLink {
        return linkOf(.{ .memory = base[0..pool.stack_size_bytes] });
    }

    fn linkOf(stack: Stack) *FreeLink {
        return @ptrFromInt(stack.top() - @sizeOf(FreeLink));
    }

    fn grow(pool: *Pool) AcquireError!void {
        assert(pool.fresh.len == 0);
        const slab_len = pool.stack_size_bytes * config.slab_stacks;
        {
            pool.slabs_lock.lock();
            defer pool.slabs_lock.unlock();
            pool.slabs.ensureUnusedCapacity(pool.gpa, 1) catch return error.SystemResources;
        }

        const slab_ptr = os.mapAnonymous(slab_len) catch |err| {
            pool.logExhaustion(err);
            return error.SystemResources;
        };
        const slab = slab_ptr[0..slab_len];
        errdefer os.unmap(slab);
        os.adviseNoHugePages(slab);
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
        pool.fresh_count.store(config.slab_stacks, .monotonic);
        pool.counters.mapped.add(config.slab_stacks);
    }

    /// Installs the guard page at the bottom of every stack of `slab`.
    fn installGuards(
        pool: *Pool,
        slab: []align(page_size) u8,
    ) (AcquireError || os.UnexpectedError)!void {
        assert(pool.guard == .page);
        assert(slab.len == pool.stack_size_bytes * config.slab_stacks);
        if (!pool.guard_splits_mappings and !pool.guard_batch_unsupported) {
            var guards: [config.slab_stacks]os.IoVec = undefined;
            for (&guards, 0..) |*guard, index| {
                guard.* = .{ .base = slab.ptr + index * pool.stack_size_bytes, .len = page_size };
            }
            if (os.adviseGuardBatch(&guards)) |_| return else |err| switch (err) {
                error.Unsupported => pool.guard_batch_unsupported = true,
                error.SystemResources => return error.SystemResources,
            }
        }
        var index: usize = 0;
        while (index < config.slab_stacks) : (index += 1) {
            try pool.installGuard(@alignCast(slab[index * pool.stack_size_bytes ..][0..page_size]));
        }
    }

    fn installGuard(
        pool: *Pool,
        page: []align(page_size) u8,
    ) (AcquireError || os.UnexpectedError)!void {
        assert(page.len == page_size);
        if (!pool.guard_splits_mappings) {
            const rc = linux.madvise(page.ptr, page_size, os.madv_guard_install);
            switch (os.errno(rc)) {
                .SUCCESS => return,
                // Kernel older than 6.13: fall back to a PROT_NONE page.
                .INVAL, .NOSYS => pool.guard_splits_mappings = true,
                .NOMEM, .AGAIN => return error.SystemResources,
                else => |e| return os.unexpectedErrno(e),
            }
        }
        const rc = linux.mprotect(page.ptr, page_size, .{});
        switch (os.errno(rc)) {
            .SUCCESS => {},
            .NOMEM, .AGAIN => return error.SystemResources,
            else => |e| return os.unexpectedErrno(e),
        }
    }

    fn logExhaustion(pool: *Pool, err: anyerror) void {
        if (pool.logged_exhaustion) return;
        pool.logged_exhaustion = true;
        const max_map_count = os.maxMapCount() orelse 0;
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
