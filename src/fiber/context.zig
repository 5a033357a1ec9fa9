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

/// A suspended fiber: its registers, and in TSan builds its TSan fiber.
pub const Context = struct {
    registers: std.Io.fiber.Context,
    sanitizer: SanitizerFiber = no_sanitizer_fiber,
};

/// Saves the running fiber into `old` and resumes `new`.
pub inline fn switchTo(old: *Context, new: *Context) void {
    if (sanitized) {
        old.sanitizer = tsan.__tsan_get_current_fiber();
        // Flags 0: a synchronising switch (see the top of the file).
        tsan.__tsan_switch_to_fiber(new.sanitizer.?, 0);
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

/// Prepares `context` so that switching to it calls `function(argument)` on the stack whose
/// highest address is `stack_top`. `function` must never return.
pub fn prepare(
    context: *Context,
    stack_top: usize,
    function: *const fn (argument: *anyopaque) callconv(.c) noreturn,
    argument: *anyopaque,
) void {
    const frame = startFrame(stack_top);
    const frame_address = @intFromPtr(frame);
    const sanitizer: SanitizerFiber = if (sanitized) tsan.__tsan_create_fiber(0) else {};
    frame.* = .{
        .function = function,
        .argument = argument,
        .sanitizer = if (sanitized) sanitizer else null,
    };
    context.sanitizer = sanitizer;
    context.registers = switch (builtin.cpu.arch) {
        // `entry` is reached by a jump, as if called: the return-address slot sits below the
        // frame, and must read 0 (see the top of the file), whatever the stack held before.
        .x86_64 => registers: {
            const return_address: *usize = @ptrFromInt(frame_address - 8);
            return_address.* = 0;
            break :registers .{ .rsp = frame_address - 8, .rbp = 0, .rip = @intFromPtr(&entry) };
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

fn entry() callconv(.naked) noreturn {
    switch (builtin.cpu.arch) {
        .x86_64 => asm volatile (
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

/// Windows x64 needs a switch of its own (its ABI's callee-saved xmm6-15, rdi and rsi, the
/// first argument in rcx, and the thread block's stack bounds), which weft does not have yet.
fn skipOnWindows(src: std.builtin.SourceLocation) error{SkipZigTest}!void {
    if (builtin.os.tag == .windows) return os.skipTest(src, "no fiber switch for Windows yet");
}

test "context: ping-pong between two fibers" {
    try skipOnWindows(@src());
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
    prepare(&pair.fiber, stack_top, &Pair.run, &pair);
    defer finish(stack_top);
    for (0..1000) |i| {
        try std.testing.expectEqual(i, pair.count);
        switchTo(&pair.main, &pair.fiber);
    }
    try std.testing.expectEqual(@as(usize, 1000), pair.count);
}

test "context: a stack trace taken on a fiber ends at its start" {
    try skipOnWindows(@src());
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
    prepare(&fiber.fiber, stack_top, &Fiber.run, &fiber);
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
