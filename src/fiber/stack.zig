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
//! 4,000 mappings. On older kernels the guard falls back to `mprotect(PROT_NONE)`, which splits
//! the slab into two mappings per stack; that ceiling is reported once, with what to change.
//! `.none` skips guards and relies on a canary word checked at every switch (documented
//! trade-off: an overflow is detected after the fact, not prevented).
const std = @import("std");
const linux = std.os.linux;
const assert = std.debug.assert;
const config = @import("../config.zig");
const os = @import("../os/linux.zig");

const page_size = std.heap.page_size_min;
const log = std.log.scoped(.weft);

pub const Guard = enum {
    /// A guard page below every stack; an overflow faults. The default.
    page,
    /// No guard page; a canary at the bottom of each stack is checked on every switch away.
    none,
};

/// One fiber stack. The fiber runs from `top()` downwards; `memory[0..page_size]` is the guard
/// page when the pool guards stacks.
pub const Stack = struct {
    memory: []align(page_size) u8,

    pub fn top(stack: Stack) usize {
        return @intFromPtr(stack.memory.ptr) + stack.memory.len;
    }

    fn canary(stack: Stack) *u64 {
        return @ptrCast(stack.memory.ptr);
    }

    /// For unguarded stacks: whether the lowest word still holds the canary.
    pub fn canaryIntact(stack: Stack) bool {
        return stack.canary().* == config.stack_canary;
    }
};

pub const AcquireError = error{
    /// The kernel refused a new slab or guard (memory, or `vm.max_map_count`).
    SystemResources,
};

/// A pool of stacks owned by one executor: not thread-safe, no locks.
pub const Pool = struct {
    gpa: std.mem.Allocator,
    stack_size_bytes: usize,
    guard: Guard,
    /// Set when `MADV_GUARD_INSTALL` is unavailable and guards are `mprotect`ed instead.
    guard_splits_mappings: bool = false,
    free: std.ArrayList(Stack) = .empty,
    slabs: std.ArrayList([]align(page_size) u8) = .empty,
    /// Stacks handed out and not yet released.
    live: usize = 0,
    /// Set once the failure to map more stacks has been logged, so it is logged once.
    logged_exhaustion: bool = false,

    pub fn init(gpa: std.mem.Allocator, stack_size_bytes: usize, guard: Guard) Pool {
        assert(stack_size_bytes % page_size == 0);
        assert(stack_size_bytes >= config.stack_size_bytes_min);
        return .{ .gpa = gpa, .stack_size_bytes = stack_size_bytes, .guard = guard };
    }

    pub fn deinit(pool: *Pool) void {
        for (pool.slabs.items) |slab| os.unmap(slab);
        pool.slabs.deinit(pool.gpa);
        pool.free.deinit(pool.gpa);
        pool.* = undefined;
    }

    pub fn acquire(pool: *Pool) AcquireError!Stack {
        if (pool.free.pop()) |stack| {
            pool.live += 1;
            return stack;
        }
        try pool.grow();
        const stack = pool.free.pop().?;
        pool.live += 1;
        return stack;
    }

    pub fn release(pool: *Pool, stack: Stack) void {
        assert(pool.live > 0);
        assert(stack.memory.len == pool.stack_size_bytes);
        checkCanary(stack, pool.guard);
        pool.live -= 1;
        // Capacity for every stack of every slab was reserved in `grow`.
        pool.free.appendAssumeCapacity(stack);
    }

    fn grow(pool: *Pool) AcquireError!void {
        const slab_len = pool.stack_size_bytes * config.slab_stacks;
        const total = pool.slabs.items.len * config.slab_stacks + config.slab_stacks;
        pool.free.ensureTotalCapacity(pool.gpa, total) catch return error.SystemResources;
        pool.slabs.ensureUnusedCapacity(pool.gpa, 1) catch return error.SystemResources;

        const slab_ptr = os.mapAnonymous(slab_len, false) catch |err| {
            pool.logExhaustion(err);
            return error.SystemResources;
        };
        const slab = slab_ptr[0..slab_len];
        var guarded: usize = 0;
        errdefer os.unmap(slab);
        // Hand out the lowest stacks last, so the slab is touched from its top first.
        var index: usize = config.slab_stacks;
        while (index > 0) {
            index -= 1;
            const memory: []align(page_size) u8 = @alignCast(
                slab[index * pool.stack_size_bytes ..][0..pool.stack_size_bytes],
            );
            const stack: Stack = .{ .memory = memory };
            pool.installGuard(stack) catch |err| {
                pool.logExhaustion(err);
                return error.SystemResources;
            };
            guarded += 1;
            pool.free.appendAssumeCapacity(stack);
        }
        assert(guarded == config.slab_stacks);
        pool.slabs.appendAssumeCapacity(slab);
    }

    fn installGuard(pool: *Pool, stack: Stack) (AcquireError || os.UnexpectedError)!void {
        switch (pool.guard) {
            .none => stack.canary().* = config.stack_canary,
            .page => {
                if (!pool.guard_splits_mappings) {
                    const rc = linux.madvise(stack.memory.ptr, page_size, madv_guard_install);
                    switch (os.errno(rc)) {
                        .SUCCESS => return,
                        // Kernel older than 6.13: fall back to a PROT_NONE page.
                        .INVAL, .NOSYS => pool.guard_splits_mappings = true,
                        .NOMEM, .AGAIN => return error.SystemResources,
                        else => |e| return os.unexpectedErrno(e),
                    }
                }
                const rc = linux.mprotect(stack.memory.ptr, page_size, .{});
                switch (os.errno(rc)) {
                    .SUCCESS => {},
                    .NOMEM, .AGAIN => return error.SystemResources,
                    else => |e| return os.unexpectedErrno(e),
                }
            },
        }
    }

    fn logExhaustion(pool: *Pool, err: anyerror) void {
        if (pool.logged_exhaustion) return;
        pool.logged_exhaustion = true;
        const max_map_count = os.maxMapCount() orelse 0;
        if (pool.guard_splits_mappings) {
            log.warn("weft: cannot map more fiber stacks after {d} live ({t}). Guard pages need " ++
                "two mappings per stack on this kernel (no MADV_GUARD_INSTALL) and " ++
                "vm.max_map_count is {d}: raise it (sysctl -w vm.max_map_count=N) or use " ++
                ".stack_guard = .none. New tasks get error.ConcurrencyUnavailable.", .{
                pool.live, err, max_map_count,
            });
        } else {
            log.warn("weft: cannot map more fiber stacks after {d} live ({t}): out of memory " ++
                "or address space; lower .stack_size_bytes. New tasks get " ++
                "error.ConcurrencyUnavailable.", .{ pool.live, err });
        }
    }
};

/// `MADV_GUARD_INSTALL` from the Linux 6.13 uapi headers.
const madv_guard_install = 102;

fn overflowDetected(stack: Stack) noreturn {
    @branchHint(.cold);
    std.debug.panic("weft: fiber stack overflow detected (stack at 0x{x}, {d} bytes, no guard " ++
        "page): raise .stack_size_bytes or use .stack_guard = .page", .{
        @intFromPtr(stack.memory.ptr), stack.memory.len,
    });
}

/// Panics when an unguarded stack's canary was overwritten. Called on every switch away.
pub fn checkCanary(stack: Stack, guard: Guard) void {
    if (guard == .none and !stack.canaryIntact()) overflowDetected(stack);
}

test "Pool: stacks are reused and one slab serves many stacks" {
    var pool: Pool = .init(std.testing.allocator, 64 * 1024, .page);
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
    try std.testing.expectEqual(@as(usize, 0), pool.live);
}

test "Pool: unguarded stacks carry a canary" {
    var pool: Pool = .init(std.testing.allocator, 16 * 1024, .none);
    defer pool.deinit();
    const a = try pool.acquire();
    try std.testing.expect(a.canaryIntact());
    pool.release(a);
}
