//! Context switching between fibers, on `std.Io.fiber.contextSwitch`.
//!
//! A new fiber starts in `entry`, a naked trampoline that passes the address of its start
//! frame (placed at the top of the fiber's stack) to a normal function. std's switch is an
//! `asm volatile` that clobbers every register, so the compiler itself saves what is live.
//!
//! `start` is the outermost frame of a fiber, as `_start` is of a thread: its return address
//! reads 0, and its frame pointer 0, which is where std's unwinders (DWARF and frame pointer)
//! stop. Otherwise a stack trace taken on a fiber (a panic's, or the testing allocator's on
//! every free) walks on past `start` into whatever the switching code left: on aarch64 the
//! link register still held a return address into `Executor.resumeFrom`, and the DWARF
//! unwinder, applying that function's rules to a frame pointer of 0, read address 0x58.
//!
//! ## ThreadSanitizer
//!
//! In a build with `-fsanitize-thread` (`builtin.sanitize_thread`) every fiber also has a TSan
//! fiber: TSan keeps a shadow call stack and a vector clock per thread, and without being told
//! about switches it sees all fibers of a thread as one stack that jumps around. Then a task
//! that ends leaves its frames on that shadow stack (its last frames never return), which
//! overflows after some ten thousand tasks and corrupts the runtime's memory, and a task that
//! migrates to another thread looks like a race with itself. So:
//! - `prepare` creates a TSan fiber for the new context and keeps its handle in the context and
//!   in the start frame, on the fiber's own stack, where `finish` finds it once the fiber has
//!   ended (its owner, such as a `Task`, may be gone by then);
//! - `switchTo` records the running TSan fiber in `old` (so a thread's own context, such as an
//!   executor thread's or the main task's, needs no setup) and calls `__tsan_switch_to_fiber`
//!   right before the switch, as TSan requires, with synchronisation: the switch really
//!   orders the two fibers, and an executor that took a task from a queue (an acquire made by
//!   the switching fiber) hands that knowledge on to the task it resumes.
//! In other builds the handle is `void` and none of this exists.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const os = @import("../os/host.zig");

const sanitized = builtin.sanitize_thread;

/// TSan's handle of a fiber (its `ThreadState`); nothing outside TSan builds.
const SanitizerFiber = if (sanitized) ?*anyopaque else void;
const no_sanitizer_fiber: SanitizerFiber = if (sanitized) null else {};

const tsan = struct {
    extern fn __tsan_get_current_fiber() *anyopaque;
    extern fn __tsan_create_fiber(flags: c_uint) *anyopaque;
    extern fn __tsan_destroy_fiber(fiber: *anyopaque) void;
    extern fn __tsan_switch_to_fiber(fiber: *anyopaque, flags: c_uint) void;
};

/// A suspended fiber: its registers, in TSan builds its TSan fiber, and on Windows its stack's
/// bounds.
pub const Context = struct {
    registers: std.Io.fiber.Context,
    sanitizer: SanitizerFiber = no_sanitizer_fiber,
    stack_bounds: StackBounds = no_stack_bounds,
};

/// Windows keeps the running stack's bounds in the thread's environment block (`NT_TIB`'s
/// `StackBase` and `StackLimit`), which its stack walkers and exception dispatch check a frame
/// against, and MSVC's `__chkstk` compares against: a switch carries them, as the OS's own
/// `SwitchToFiber` does. (`DeallocationStack`, which names the thread's own stack for its
/// exit, stays: every thread ends on its own stack.)
const StackBounds = if (windows) struct { base: usize, limit: usize } else void;
const no_stack_bounds: StackBounds = if (windows) .{ .base = 0, .limit = 0 } else {};
const windows = builtin.os.tag == .windows;

/// Saves the running fiber into `old` and resumes `new`.
pub inline fn switchTo(old: *Context, new: *Context) void {
    if (sanitized) {
        old.sanitizer = tsan.__tsan_get_current_fiber();
        // Flags 0: a synchronising switch (see the top of the file).
        tsan.__tsan_switch_to_fiber(new.sanitizer.?, 0);
    }
    if (builtin.os.tag == .windows) {
        const tib = &std.os.windows.teb().NtTib;
        old.stack_bounds = .{
            .base = @intFromPtr(tib.StackBase),
            .limit = @intFromPtr(tib.StackLimit),
        };
        tib.StackBase = @ptrFromInt(new.stack_bounds.base);
        tib.StackLimit = @ptrFromInt(new.stack_bounds.limit);
    }
    const message: std.Io.fiber.Switch = .{ .old = &old.registers, .new = &new.registers };
    switch (builtin.cpu.arch) {
        .x86_64 => switchX86(&message),
        .aarch64 => switchAarch64(&message),
        else => _ = std.Io.fiber.contextSwitch(&message),
    }
}

// weft's own switch for x86_64 and aarch64: the same code as `std.Io.fiber.contextSwitch`
// (Zig 0.16), with every vector register declared clobbered. std's lists name the x86_64
// vector registers only as `zmm0`-`zmm31` and aarch64's only as SVE's `z0`-`z31`; on a CPU
// without AVX-512 (or SVE) LLVM drops those names, so it believed `xmm0`-`xmm15` (the `v`
// registers) survived a switch. They do not: the other fiber ran in between. Found when
// weft.Sim's scheduler loop, in a ReleaseFast build on this AMD EPYC, kept the constant 1 of
// `steps += 1` in `xmm0` across a switch and added a fiber's stack address instead.

inline fn switchX86(message: *const std.Io.fiber.Switch) void {
    _ = asm volatile (
        \\ movq 0(%%rsi), %%rax
        \\ movq 8(%%rsi), %%rcx
        \\ leaq 0f(%%rip), %%rdx
        \\ movq %%rsp, 0(%%rax)
        \\ movq %%rbp, 8(%%rax)
        \\ movq %%rdx, 16(%%rax)
        \\ movq 0(%%rcx), %%rsp
        \\ movq 8(%%rcx), %%rbp
        \\ jmpq *16(%%rcx)
        \\0:
        : [received] "={rsi}" (-> *const std.Io.fiber.Switch),
        : [sent] "{rsi}" (message),
        : x86_clobbers);
}

const x86_clobbers: std.builtin.assembly.Clobbers = clobbers: {
    @setEvalBranchQuota(20_000);
    var clobbers: std.builtin.assembly.Clobbers = .{
        .rax = true,
        .rcx = true,
        .rdx = true,
        .rbx = true,
        .rsi = true,
        .rdi = true,
        .r8 = true,
        .r9 = true,
        .r10 = true,
        .r11 = true,
        .r12 = true,
        .r13 = true,
        .r14 = true,
        .r15 = true,
        .fpsr = true,
        .fpcr = true,
        .mxcsr = true,
        .dirflag = true,
        .memory = true,
    };
    for (0..8) |index| @field(clobbers, std.fmt.comptimePrint("mm{d}", .{index})) = true;
    for (0..32) |index| {
        @field(clobbers, std.fmt.comptimePrint("xmm{d}", .{index})) = true;
        @field(clobbers, std.fmt.comptimePrint("ymm{d}", .{index})) = true;
        @field(clobbers, std.fmt.comptimePrint("zmm{d}", .{index})) = true;
    }
    break :clobbers clobbers;
};

inline fn switchAarch64(message: *const std.Io.fiber.Switch) void {
    _ = asm volatile (
        \\ ldp x0, x2, [x1]
        \\ ldr x3, [x2, #16]
        \\ mov x4, sp
        \\ stp x4, fp, [x0]
        \\ adr x5, 0f
        \\ ldp x4, fp, [x2]
        \\ str x5, [x0, #16]
        \\ mov sp, x4
        \\ br x3
        \\0:
        : [received] "={x1}" (-> *const std.Io.fiber.Switch),
        : [sent] "{x1}" (message),
        : aarch64_clobbers);
}

const aarch64_clobbers: std.builtin.assembly.Clobbers = clobbers: {
    @setEvalBranchQuota(20_000);
    var clobbers: std.builtin.assembly.Clobbers = .{
        .fpcr = true,
        .fpsr = true,
        .ffr = true,
        .memory = true,
    };
    // Every general register but x18 (the platform register), x29 (fp, switched) and sp.
    for (0..31) |index| {
        if (index == 18 or index == 29) continue;
        @field(clobbers, std.fmt.comptimePrint("x{d}", .{index})) = true;
    }
    for (0..32) |index| {
        @field(clobbers, std.fmt.comptimePrint("v{d}", .{index})) = true;
        @field(clobbers, std.fmt.comptimePrint("z{d}", .{index})) = true;
    }
    for (0..16) |index| @field(clobbers, std.fmt.comptimePrint("p{d}", .{index})) = true;
    break :clobbers clobbers;
};

/// The data a fresh fiber finds at the top of its stack.
pub const StartFrame = extern struct {
    function: *const fn (argument: *anyopaque) callconv(.c) noreturn,
    argument: *anyopaque,
    /// The TSan fiber `prepare` created, for `finish` (null outside TSan builds).
    sanitizer: ?*anyopaque,
};

const frame_align = 16;

/// Prepares `context` so that switching to it calls `function(argument)` on `stack`, from its
/// top (whose address is a multiple of 16). `function` must never return.
pub fn prepare(
    context: *Context,
    stack: []u8,
    function: *const fn (argument: *anyopaque) callconv(.c) noreturn,
    argument: *anyopaque,
) void {
    const stack_top = @intFromPtr(stack.ptr) + stack.len;
    const frame = startFrame(stack_top);
    const frame_address = @intFromPtr(frame);
    const sanitizer: SanitizerFiber = if (sanitized) tsan.__tsan_create_fiber(0) else {};
    frame.* = .{
        .function = function,
        .argument = argument,
        .sanitizer = if (sanitized) sanitizer else null,
    };
    context.sanitizer = sanitizer;
    if (builtin.os.tag == .windows) {
        context.stack_bounds = .{ .base = stack_top, .limit = @intFromPtr(stack.ptr) };
    }
    context.registers = switch (builtin.cpu.arch) {
        // `entry` is reached by a jump, as if called: the return-address slot sits below the
        // frame, and must read 0 (see the top of the file), whatever the stack held before.
        // On Windows the 32 bytes above it are `start`'s home space, the callee's to spill
        // its arguments into: below the frame, or `start` would overwrite what it reads.
        .x86_64 => registers: {
            const rsp = frame_address - 8 - x86_home_space_bytes;
            const return_address: *usize = @ptrFromInt(rsp);
            return_address.* = 0;
            break :registers .{ .rsp = rsp, .rbp = 0, .rip = @intFromPtr(&entry) };
        },
        // The return address is the link register, zeroed by `entry`.
        .aarch64, .riscv64 => .{ .sp = frame_address, .fp = 0, .pc = @intFromPtr(&entry) },
        else => @compileError("weft fibers support x86_64, aarch64 and riscv64"),
    };
}

/// Releases what `prepare` took for the fiber whose stack ends at `stack_top`, once that fiber
/// has ended or will never run again (not from the fiber itself). Call it before the stack is
/// reused: the handle lives in the fiber's start frame.
pub fn finish(stack_top: usize) void {
    if (!sanitized) return;
    const frame = startFrame(stack_top);
    const fiber = frame.sanitizer.?; // prepared, and finished only once
    const current = tsan.__tsan_get_current_fiber();
    assert(fiber != current);
    frame.sanitizer = null;
    // TSan's runtime (LLVM 21, as bundled with Zig 0.16) leaves a fiber's trace head
    // uninitialized until the fiber records its first event, and destroying a fiber that never
    // recorded one walks that garbage: a fiber prepared and never run (an executor's idle
    // fiber, a task refused at `tasks_max`) crashed TSan builds in `Runtime.deinit`. Making
    // the fiber current for an instant, with a synchronizing switch, records an event.
    tsan.__tsan_switch_to_fiber(fiber, 0);
    tsan.__tsan_switch_to_fiber(current, 0);
    tsan.__tsan_destroy_fiber(fiber);
}

fn startFrame(stack_top: usize) *StartFrame {
    assert(stack_top % frame_align == 0);
    return @ptrFromInt(std.mem.alignBackward(usize, stack_top - @sizeOf(StartFrame), frame_align));
}

/// The Windows x64 calling convention's home space: 32 bytes above a call's return address
/// that the callee may write (its four register arguments' slots). None in the System V ABI.
const x86_home_space_bytes = if (builtin.os.tag == .windows) 32 else 0;

comptime {
    // `entry`'s Windows offset: the return-address slot, then the home space.
    assert(builtin.os.tag != .windows or 8 + x86_home_space_bytes == 40);
}

fn entry() callconv(.naked) noreturn {
    switch (builtin.cpu.arch) {
        // The start frame's address, as `start`'s first argument: rdi (System V) or rcx
        // (Windows x64), past the return-address slot and the home space.
        .x86_64 => if (builtin.os.tag == .windows) asm volatile (
            \\ leaq 40(%%rsp), %%rcx
            \\ jmp %[start:P]
            :
            : [start] "X" (&start),
        ) else asm volatile (
            \\ leaq 8(%%rsp), %%rdi
            \\ jmp %[start:P]
            :
            : [start] "X" (&start),
        ),
        // The link register still holds whatever the switching code left there: zero it, the
        // end of the stack for unwinders (see the top of the file).
        .aarch64 => asm volatile (
            \\ mov x0, sp
            \\ mov lr, #0
            \\ b %[start]
            :
            : [start] "X" (&start),
        ),
        .riscv64 => asm volatile (
            \\ mv a0, sp
            \\ li ra, 0
            \\ tail %[start]@plt
            :
            : [start] "X" (&start),
        ),
        else => @compileError("weft fibers support x86_64, aarch64 and riscv64"),
    }
}

fn start(frame: *const StartFrame) callconv(.withStackAlign(.c, frame_align)) noreturn {
    frame.function(frame.argument);
}

test "context: ping-pong between two fibers" {
    const Pair = struct {
        main: Context = .{ .registers = undefined },
        fiber: Context = .{ .registers = undefined },
        count: usize = 0,
        fn run(argument: *anyopaque) callconv(.c) noreturn {
            const pair: *@This() = @ptrCast(@alignCast(argument));
            while (true) {
                pair.count += 1;
                switchTo(&pair.fiber, &pair.main);
            }
        }
    };
    const stack = try std.testing.allocator.alignedAlloc(u8, .@"16", 64 * 1024);
    defer std.testing.allocator.free(stack);
    var pair: Pair = .{};
    const stack_top = @intFromPtr(stack.ptr) + stack.len;
    prepare(&pair.fiber, stack, &Pair.run, &pair);
    defer finish(stack_top);
    for (0..1000) |i| {
        try std.testing.expectEqual(i, pair.count);
        switchTo(&pair.main, &pair.fiber);
    }
    try std.testing.expectEqual(@as(usize, 1000), pair.count);
}

test "context: a stack trace taken on a fiber ends at its start" {
    const Fiber = struct {
        main: Context = .{ .registers = undefined },
        fiber: Context = .{ .registers = undefined },
        addresses: [32]usize = undefined,
        trace: ?std.debug.StackTrace = null,
        fn run(argument: *anyopaque) callconv(.c) noreturn {
            const self: *@This() = @ptrCast(@alignCast(argument));
            // What the testing allocator does on every free, and a panic on a fiber.
            self.trace = std.debug.captureCurrentStackTrace(.{}, &self.addresses);
            switchTo(&self.fiber, &self.main);
            unreachable; // never resumed
        }
    };
    const stack = try std.testing.allocator.alignedAlloc(u8, .@"16", 64 * 1024);
    defer std.testing.allocator.free(stack);
    // A reused stack: what a previous fiber left below the start frame must not be followed.
    @memset(stack, 0xaa);
    var fiber: Fiber = .{};
    const stack_top = @intFromPtr(stack.ptr) + stack.len;
    prepare(&fiber.fiber, stack, &Fiber.run, &fiber);
    defer finish(stack_top);
    switchTo(&fiber.main, &fiber.fiber);
    const trace = fiber.trace.?;
    // The unwinder reached the end: `run`'s caller `start` is the last frame, not one in
    // whatever code switched to the fiber.
    // ReleaseFast and ReleaseSmall builds take no stack trace at all (nothing captured, the
    // rest unknown): nothing to walk past the start frame.
    const fast = builtin.mode == .ReleaseFast or builtin.mode == .ReleaseSmall;
    if (fast and trace.return_addresses.len == 0) {
        return os.skipTest(@src(), "no stack traces in this build mode");
    }
    if (trace.skipped != .none) return error.TestUnexpectedResult;
    try std.testing.expect(trace.return_addresses.len <= 4);
}

/// The registers the x86_64 ABI has a callee preserve (rbp aside, which the switch itself
/// carries): rbx and r12-r15; on Windows also rdi, rsi and xmm6-xmm15. The other fiber may
/// leave any register changed, so `switchTo` must have the compiler save these around it.
const callee_saved = if (builtin.os.tag == .windows)
    [_][]const u8{ "rbx", "r12", "r13", "r14", "r15", "rsi", "rdi" } ++ xmm_callee_saved
else
    [_][]const u8{ "rbx", "r12", "r13", "r14", "r15" };
const xmm_callee_saved = [_][]const u8{
    "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15",
};

/// Assembly that sets each of `callee_saved` from `%rax` (`rax` + its index when `count`):
/// xmm registers by `pinsrq` (SSE4.1, every x86_64 CPU weft's tests run on), which Zig's own
/// x86_64 assembler takes where it refuses `movq %rax, %xmm6`.
fn setCalleeSaved(comptime count: bool) []const u8 {
    comptime var text: []const u8 = "";
    inline for (callee_saved, 0..) |register, index| {
        if (count and index > 0) text = text ++ "incq %%rax\n";
        text = text ++ if (register[0] == 'x')
            "pinsrq $0, %%rax, %%" ++ register ++ "\n"
        else
            "movq %%rax, %%" ++ register ++ "\n";
    }
    return text;
}

/// Assembly that stores each of `callee_saved` at `%rax` + 8 * its index.
fn storeCalleeSaved() []const u8 {
    comptime var text: []const u8 = "";
    inline for (callee_saved, 0..) |register, index| {
        const offset = std.fmt.comptimePrint("{d}", .{8 * index});
        text = text ++ if (register[0] == 'x')
            "pextrq $0, %%" ++ register ++ ", " ++ offset ++ "(%%rax)\n"
        else
            "movq %%" ++ register ++ ", " ++ offset ++ "(%%rax)\n";
    }
    return text;
}

test "context: a switch keeps the ABI's callee-saved registers, whatever the other fiber did" {
    if (builtin.cpu.arch != .x86_64) return os.skipTest(@src(), "an x86_64 check");
    const Check = struct {
        main: Context = .{ .registers = undefined },
        fiber: Context = .{ .registers = undefined },

        fn run(argument: *anyopaque) callconv(.c) noreturn {
            const check: *@This() = @ptrCast(@alignCast(argument));
            while (true) {
                // Garbage in every register the ABI says a callee keeps, then back.
                asm volatile ("movq $-1, %%rax\n" ++ setCalleeSaved(false) ::: x86_clobbers);
                switchTo(&check.fiber, &check.main);
            }
        }

        /// Called from the assembly below as a plain function: the ABI's contract applies.
        fn roundTrip(check: *@This()) callconv(.c) void {
            switchTo(&check.main, &check.fiber);
        }
    };
    const stack = try std.testing.allocator.alignedAlloc(u8, .@"16", 64 * 1024);
    defer std.testing.allocator.free(stack);
    var check: Check = .{};
    const stack_top = @intFromPtr(stack.ptr) + stack.len;
    prepare(&check.fiber, stack, &Check.run, &check);
    defer finish(stack_top);
    // Each register set to 0x100 + its index before a call of `roundTrip` and read after it,
    // all in one block of assembly, so that nothing of the compiler's sits between. The call
    // gets its argument (rdi, or rcx on Windows), a 16-byte aligned stack and Windows' home
    // space.
    var out: [callee_saved.len]u64 = undefined;
    const argument = if (builtin.os.tag == .windows) "%%rcx" else "%%rdi";
    asm volatile ("movq %%rsp, %%rax\n" ++
            "andq $-16, %%rsp\n" ++
            "pushq %%rax\n" ++
            "pushq %%r10\n" ++
            "movq $0x100, %%rax\n" ++
            setCalleeSaved(true) ++
            "movq %%r9, " ++ argument ++ "\n" ++
            "subq $32, %%rsp\n" ++
            "callq *%%r8\n" ++
            "addq $32, %%rsp\n" ++
            "popq %%rax\n" ++
            storeCalleeSaved() ++
            "popq %%rsp\n"
        :
        : [function] "{r8}" (&Check.roundTrip),
          [check] "{r9}" (&check),
          [out] "{r10}" (&out),
        : x86_clobbers);
    for (out, 0..) |value, index| {
        if (value != 0x100 + index) {
            std.debug.print("{s} was 0x{x} after a switch, not 0x{x}\n", .{
                callee_saved[index], value, 0x100 + index,
            });
            return error.TestUnexpectedResult;
        }
    }
}

test "context: a deep frame on a fiber probes its stack down to the guard page's edge" {
    // A frame larger than a page makes the compiler probe each page on the way down (Windows'
    // __chkstk, Zig's inline probes elsewhere): on a fiber's stack, mapped and guarded as the
    // stack pools map them, every probe must land on a mapped page until the guard.
    const page_size = std.heap.page_size_min;
    const stack_bytes = 256 * 1024;
    const memory = try os.mapAnonymous(stack_bytes);
    const stack = memory[0..stack_bytes];
    defer os.unmap(stack);
    try os.protectNone(@alignCast(stack[0..page_size]));
    const Deep = struct {
        main: Context = .{ .registers = undefined },
        fiber: Context = .{ .registers = undefined },
        sum: u64 = 0,

        fn run(argument: *anyopaque) callconv(.c) noreturn {
            const deep: *@This() = @ptrCast(@alignCast(argument));
            deep.sum = @call(.never_inline, touchFrame, .{});
            switchTo(&deep.fiber, &deep.main);
            unreachable; // never resumed
        }

        /// About 200 KiB of frame, well within the stack above the guard page.
        fn touchFrame() u64 {
            var frame: [200 * 1024]u8 = undefined;
            std.mem.doNotOptimizeAway(&frame);
            frame[0] = 1;
            frame[frame.len - 1] = 2;
            std.mem.doNotOptimizeAway(&frame);
            return frame[0] + frame[frame.len - 1];
        }
    };
    var deep: Deep = .{};
    const stack_top = @intFromPtr(stack.ptr) + stack.len;
    prepare(&deep.fiber, stack, &Deep.run, &deep);
    defer finish(stack_top);
    switchTo(&deep.main, &deep.fiber);
    try std.testing.expectEqual(@as(u64, 3), deep.sum);
}

test "context: on Windows a fiber runs with its own stack's bounds in the thread block" {
    if (builtin.os.tag != .windows) return os.skipTest(@src(), "Windows' thread block");
    const Bounds = struct {
        main: Context = .{ .registers = undefined },
        fiber: Context = .{ .registers = undefined },
        seen: StackBounds = no_stack_bounds,

        fn run(argument: *anyopaque) callconv(.c) noreturn {
            const bounds: *@This() = @ptrCast(@alignCast(argument));
            const tib = &std.os.windows.teb().NtTib;
            bounds.seen = .{
                .base = @intFromPtr(tib.StackBase),
                .limit = @intFromPtr(tib.StackLimit),
            };
            switchTo(&bounds.fiber, &bounds.main);
            unreachable; // never resumed
        }
    };
    const stack = try std.testing.allocator.alignedAlloc(u8, .@"16", 64 * 1024);
    defer std.testing.allocator.free(stack);
    const tib = &std.os.windows.teb().NtTib;
    const thread_base = @intFromPtr(tib.StackBase);
    const thread_limit = @intFromPtr(tib.StackLimit);
    var bounds: Bounds = .{};
    prepare(&bounds.fiber, stack, &Bounds.run, &bounds);
    defer finish(@intFromPtr(stack.ptr) + stack.len);
    switchTo(&bounds.main, &bounds.fiber);
    try std.testing.expectEqual(@intFromPtr(stack.ptr) + stack.len, bounds.seen.base);
    try std.testing.expectEqual(@intFromPtr(stack.ptr), bounds.seen.limit);
    // Back on the thread's own stack, with its own bounds.
    try std.testing.expectEqual(thread_base, @intFromPtr(tib.StackBase));
    try std.testing.expectEqual(thread_limit, @intFromPtr(tib.StackLimit));
}
