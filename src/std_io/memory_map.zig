//! std.Io memory map entries (`File.MemoryMap`): each takes the runtime's state from
//! `userdata` (its blocking lane, its Io and its allocator, which backs a map of a file that
//! cannot be mapped) and calls the operation in `fs/memory_map.zig`.
const std = @import("std");
const Io = std.Io;
const File = Io.File;
const MemoryMap = File.MemoryMap;
const file_io = @import("file.zig");
const fs_memory_map = @import("../fs/memory_map.zig");

pub fn fileMemoryMapCreate(
    userdata: ?*anyopaque,
    file: File,
    options: MemoryMap.CreateOptions,
) MemoryMap.CreateError!MemoryMap {
    const state = file_io.stateOf(userdata);
    return fs_memory_map.create(&state.blocking, state.io(), state.gpa, file, options);
}

pub fn fileMemoryMapDestroy(userdata: ?*anyopaque, mm: *MemoryMap) void {
    fs_memory_map.destroy(file_io.stateOf(userdata).gpa, mm);
}

pub fn fileMemoryMapSetLength(
    userdata: ?*anyopaque,
    mm: *MemoryMap,
    new_len: usize,
) MemoryMap.SetLengthError!void {
    return fs_memory_map.setLength(file_io.stateOf(userdata).gpa, mm, new_len);
}

pub fn fileMemoryMapRead(userdata: ?*anyopaque, mm: *MemoryMap) File.ReadPositionalError!void {
    const blocking, const io = file_io.blockingOf(userdata);
    return fs_memory_map.read(blocking, io, mm);
}

pub fn fileMemoryMapWrite(userdata: ?*anyopaque, mm: *MemoryMap) File.WritePositionalError!void {
    const blocking, const io = file_io.blockingOf(userdata);
    return fs_memory_map.write(blocking, io, mm);
}
