//! Every limit and default of weft, each with the reason for its value.
//!
//! Names carry their unit or limit last (`_bytes`, `_ns`, `_max`). Relations between the values
//! are asserted at comptime at the bottom, so that changing one cannot silently break another.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;

/// Default virtual size of a fiber stack, guard page included: what code that runs on
/// std.Io.Threaded's 16 MiB thread stacks needs of a task. In release builds 1 MiB: up to a
/// 512 KiB frame with 512 KiB to spare. In Debug builds 2 MiB: Debug frames are several times
/// Release's (std.http.Client's `fetchInternal` has one of about 1 MiB, a library's test suite
/// found), and tests are Debug builds; a 1.5 MiB frame runs. Pages are only committed when
/// touched, so a sleeping task costs about one page whatever this is; what grows with it is
/// the page tables: one 4 KiB table per 2 MiB of address space holding a touched page or a
/// guard, so size / 512 bytes per live task (2 KiB at 1 MiB, 4 KiB at 2 MiB, 8 KiB at 4 MiB,
/// 0.5 KiB at 256 KiB: measured by `bench-sleep --stack-kib`, docs/BENCHMARKS.md). A million
/// tasks want 256 KiB.
pub const stack_size_bytes_default: usize = switch (builtin.mode) {
    .Debug => 2 * 1024 * 1024,
    .ReleaseSafe, .ReleaseFast, .ReleaseSmall => 1024 * 1024,
};

/// Smallest stack accepted: the guard page, the task's start frame and a few frames.
pub const stack_size_bytes_min = 16 * 1024;

/// Stacks per slab mapping: 1,000,000 fibers need 1e6 / 256 = 3,907 mappings, far below the
/// kernel's default `vm.max_map_count` of 65,530.
pub const slab_stacks = 256;

/// Under an `RLIMIT_AS`, the share of the stacks that fit which one executor's slab may hold
/// at most (fiber/stack.zig, `plan`): each executor maps slabs of its own, and a slab's unused
/// stacks are address space no other executor can map, so smaller slabs near the limit let
/// more tasks fit (a 256-stack slab per executor under `ulimit -v 2G` left 1,536 of them).
pub const slab_share_of_fit = 8;

/// Address space left to the rest of the process under an `RLIMIT_AS` when a runtime sizes its
/// stacks: the heap, executor, lane and watchdog threads' stacks (256 KiB to 2 MiB each), the
/// rings. A runtime that cannot fit one stack beside it fails `init` with
/// `error.AddressSpaceLimit`.
pub const address_space_reserve_bytes = 64 * 1024 * 1024;

/// The least memory a live task commits beside its stack's page tables: two pages of stack
/// (its start frame and a `std.Io` call), its `Task` and its table entry. Under a cgroup
/// `memory.max`, the task ceiling is what fits of this in `cgroup_memory_share` of the room
/// left: past it a spawn fails with `ConcurrencyUnavailable` rather than the kernel killing
/// the process for want of memory.
pub const task_committed_bytes_min = 2 * 4096 + 512;
/// The other half is the tasks' own: buffers, heap, deeper stacks.
pub const cgroup_memory_share = 2;

/// Free stacks an executor's pool keeps before it hands `pool_spill_stacks` of them to the
/// runtime's shared list, and the batch in which a pool out of free stacks takes them back
/// from there before it maps a slab (fiber/stack.zig, `Shared`). A task may end on another
/// executor than the one that gave it its stack; without the shared list the stack stayed
/// there, and a runtime whose tasks start on one executor and end on another mapped a new
/// stack for nearly every task.
pub const pool_free_max = 128;
pub const pool_spill_stacks = 64;

/// How long a free stack stays committed without being taken before its pages go back to the
/// kernel (fiber/stack.zig, `Pool.trim`): each executor sweeps its pool this often, and gives
/// back the stacks no spawn took during the whole period before, so a stack freed at the end
/// of a spike is given back within two periods. Shorter sweeps would give back stacks that a
/// server between two bursts of a steady load takes again at once (a page fault per page);
/// longer ones hold a spike's memory for longer than the issue's 5 s bound allows.
pub const stack_idle_ns = std.time.ns_per_s;

/// Free stacks each executor's pool keeps committed however long they stay idle: what the next
/// few spawns take without a page fault (a request's task, a timer's). Below `pool_free_max`.
pub const pool_hot_stacks = 32;

/// Stacks one sweep gives back at most: one `madvise` each, about 1-2 us, so a sweep holds its
/// executor for under a millisecond. A sweep cut short runs again `stack_trim_retry_ns` later,
/// letting the executor's tasks run in between: 10,000 idle stacks take about 40 sweeps.
pub const stack_trim_batch_max = 256;
pub const stack_trim_retry_ns = std.time.ns_per_ms;

/// How far `CLOCK_MONOTONIC_COARSE` may lag the precise clock: one scheduler tick, 10 ms at the
/// lowest common `CONFIG_HZ` (100). An executor that sleeps until a sweep due on the coarse
/// clock sleeps this much longer, so that it wakes with the sweep due, not just before it.
pub const coarse_clock_tick_ns = 10 * std.time.ns_per_ms;

/// Mappings left to the rest of the process (heap, libraries, thread stacks, rings) when weft
/// derives its live-fiber ceiling from `vm.max_map_count` in guarded mode.
pub const map_count_reserve = 4096;

/// Submission queue entries per io_uring. Each executor submits a handful of operations per
/// loop iteration; 256 keeps the rings (and their locked memory) small while batching well.
pub const ring_entries = 256;

/// Completions reaped per poll before their callbacks run (bounds the reap loop).
pub const reap_batch_max = 256;

/// Buckets of the futex wait table: waiters on unrelated addresses rarely share a lock.
pub const futex_buckets = 256;

/// Fibers dispatched between two non-blocking polls of the loop and the timer heap, so that a
/// stream of always-ready fibers cannot starve I/O completions and timers.
pub const dispatches_per_poll = 61;

/// Calls that return without waiting between two yields of a task (`Executor.cooperate`):
/// `checkCancel`, and file operations answered from the kernel's caches (`fs/nowait.zig`). A
/// loop of them lets the other fibers of its executor run without paying for a switch on
/// every call.
pub const calls_per_yield = 64;

/// Granularity of an executor's timed sleep: when it blocks until the next deadline, it wakes
/// at that deadline rounded up to a multiple of this, and fires every timer due by then. Timers
/// due within one window share one wake-up instead of one syscall each (a million sleepers
/// spread over a second would otherwise wake the loop every microsecond or two). 50 us is
/// Linux's own default timer slack for a thread's sleeps; a sleep is never cut short, only late
/// by less than this.
pub const timer_slack_ns = 50 * std.time.ns_per_us;

/// How often the watchdog looks at the executors while one of them is held by a task that
/// never parks (and for `held_linger_ns` after), and how long a run must last then for its
/// executor to count as held (sched/Watchdog.zig, `holdMinNs`). A task that takes a lock in a
/// loop without parking parks each time another task gets the lock; each new run of it holds
/// up what it wakes, and the timers of the executor it lands on, until the watchdog counts it
/// as held again. At half a look (6 ms) a mutex round trip with such a task took 6-25 ms;
/// `std.Io.Threaded` makes 10,000 in under a second. 200 us keeps the round trip near the
/// threads' while it costs the watchdog's thread 5,000 wake-ups a second, only while a hold
/// lasts (docs/RUNTIME.md, "Progress").
pub const held_look_ns = 200 * std.time.ns_per_us;
/// How long the watchdog keeps looking every `held_look_ns` after it last saw a hold.
pub const held_linger_ns = 100 * std.time.ns_per_ms;

/// Executors a runtime may own (one io_uring and one OS thread each).
pub const executors_max = 256;

/// Slots of an executor's stealable run queue. A burst beyond it (a timer tick waking ten
/// thousand sleepers) spills half the ring to the global queue, where idle executors take it;
/// 256 pointers keep the ring within a few cache lines' reach and steals at 128 tasks.
pub const run_queue_len = 256;

/// Times in a row an executor runs the task it woke last (the LIFO slot) before it takes the
/// oldest queued task instead. Without a cap, two tasks that wake each other would run
/// forever and starve the queue; Tokio settled on the same small number.
pub const lifo_streak_max = 3;

/// How long an executor out of work keeps stealing and polling before it sleeps in its loop.
/// Waking a sleeping executor costs an eventfd write and a thread wake-up (tens of
/// microseconds on a VM); a producer that hands over work within this window pays neither.
/// Longer burns a core for nothing when the work really has dried up.
pub const executor_search_ns = 20 * std.time.ns_per_us;

/// The window over which an executor measures how long its thread waited for a CPU
/// (contention/RunDelay.zig). Long enough that one sample (a pread of procfs, about a microsecond)
/// costs little; short enough to notice a load generator within a few milliseconds.
pub const run_delay_window_ns = 1 * std.time.ns_per_ms;

/// An executor whose thread waited for a CPU more than 1/16 of a window stops spinning in its
/// search (contention/RunDelay.zig). Measured on 2 cores shared with wrk: a spinning executor
/// waited 30-60% of the time, a non-spinning one under 1%.
pub const run_delay_ratio_max = 16;

/// How long spinning stays off after a contended window, doubling each time spinning again
/// brings the contention back. The maximum bounds how long spins stay off after the other
/// load is gone.
pub const run_delay_backoff_ns_min = 4 * std.time.ns_per_ms;
pub const run_delay_backoff_ns_max = 256 * std.time.ns_per_ms;

/// Executors retire (sched/Scheduler.zig, "Retiring executors") only once an executor's
/// thread has waited for a CPU in every window for this long. Blips last less: a new
/// executor thread placed on its creator's busy CPU waited 2.5 ms of its first window here
/// before the kernel moved it, and retiring for that halved a 10 ms yield storm. A load
/// generator sharing the cores keeps the executors waiting for as long as it runs.
pub const retire_contention_ns_min = 8 * std.time.ns_per_ms;

/// The process's CPU usage that decides a retirement is measured between two looks at most
/// this far apart (they come every `run_delay_backoff_ns_min` while the contention lasts);
/// an older mark only starts a new interval.
pub const retire_usage_window_ns_max = 4 * run_delay_backoff_ns_min;

/// Spins of a wait for another executor's few instructions (leaving a task's stack) before
/// the waiter yields its CPU: if the other thread was preempted there, spinning is futile.
pub const spin_before_yield_max = 128;

/// Spin iterations (a load and a pause each, ~1 µs in all here) a weft.sync waiter spends
/// watching for a hand-off from a task on another executor before it parks
/// (sync/WaitQueue.zig). Long enough for a short critical section elsewhere to end; short
/// enough that a waiter whose holder parked wastes little.
pub const handoff_spins_max = 64;

/// Longest task name (`Runtime.setName`): longer names are cut to it. With the task's id, birth
/// time and sequence count it fills one 64-byte entry of the runtime's task table
/// (sched/LiveTasks.zig): "conn [2001:db8::1]:65535" fits, a full IPv6 address does not.
pub const task_name_bytes_max = 32;

/// Slots of a runtime's task table at most, whatever `Runtime.Options.tasks_max` says: the
/// table is one mapping of 64 bytes per slot, reserved at init and committed only where
/// touched, so this bounds its address space (4 GiB). 64M tasks would need 256 GiB for their
/// stacks' first pages alone.
pub const task_slots_max = 1 << 26;

/// Tasks a dump copies while it holds the task table's lock, before it lets go to write them
/// out (src/task_dump.zig): spawns and ends wait for it meanwhile, each copy being a few loads
/// and a stack walk of about a microsecond per page of stack.
pub const task_dump_batch_max = 8;

/// Stack of the thread that writes a dump when `Runtime.Options.dump_signal` arrives
/// (src/task_dump.zig): the dump's batch (12 KiB at most) and `std.debug`'s lookups of names
/// and lines in the debug information, which std runs in 128 KiB (its figure for a signal
/// stack).
pub const task_dump_thread_stack_size_bytes = 256 * 1024;

/// Return addresses kept per task in a dump: a parked weft task is usually 10-25 frames deep,
/// from its function down to the switch.
pub const task_dump_frames_max = 48;

/// Stack of an executor's thread (virtual; committed when touched). Its idle context runs there:
/// the search loop, timer expiry and I/O completion callbacks, never a task.
pub const executor_thread_stack_size_bytes = 256 * 1024;

/// Stack of the watchdog's threads (sched/Watchdog.zig and its sched/Reporter.zig; virtual,
/// committed when touched): the reporter symbolizes stalling stacks, and the first load of the
/// debug information is deep.
pub const watchdog_thread_stack_size_bytes = 2 * 1024 * 1024;

/// Alternate signal stack an executor maps for its thread when the thread has none (std gives
/// every thread it starts one of `std.options.signal_stack_size`, 256 KiB by default). weft's
/// stack overflow handler runs there, then the handler it hands the fault to: std's, which
/// walks and prints the stack trace and needs about 128 KiB (std's own figure). Virtual;
/// committed only if a signal comes.
pub const signal_stack_size_bytes = 256 * 1024;

/// Workers (threads or processes) one `weft.Server` may run: each holds a listener, a runtime,
/// and in the forked shape a process; past a few per core they only add contention.
pub const server_workers_max = 64;

/// Connections one server worker serves at once by default. Each live connection holds a
/// fiber (its stack is committed only as touched) and two fds' worth of kernel buffers; past
/// the limit a new connection is closed as soon as it is accepted.
pub const server_connections_max_default = 4096;

/// Bytes of one HTTP request head the HTTP helper accepts: the read buffer of a connection.
/// A larger head gets 431. 8 KiB is what nginx and Go's net/http allow by default per line
/// (Go allows 1 MiB in total; each request under way holds this much).
pub const server_head_bytes_max = 8 * 1024;

/// Bytes of one connection's write buffer in the HTTP helper.
pub const server_write_buffer_bytes = 4 * 1024;

/// Bytes of one connection's buffer for a chunked request body, checked before std's decoder
/// reads it (server/http/Body.zig). A trailer section must fit in it whole.
pub const server_body_buffer_bytes = 4 * 1024;

/// Bytes of the buffer a connection holds while a request is under way (server/BufferPool.zig):
/// the HTTP helper's read, write and body buffers. A connection waiting for its next request
/// holds none.
pub const server_buffer_bytes = server_head_bytes_max + server_write_buffer_bytes +
    server_body_buffer_bytes;

/// Free buffers each worker keeps mapped however long they stay unused: what the next requests
/// take without a system call. Beyond them, a buffer no request needed for a whole sweep of the
/// reaper is unmapped (`BufferPool.trim`). 64 of 16 KiB: 1 MiB of address space, of which the
/// pages requests touched are resident.
pub const server_buffers_hot = 64;

/// Bytes the HTTP helper reads into its stack while a connection waits for a request, before
/// it takes a buffer from the pool and copies them there: a whole request line and the few
/// headers of a typical request, so that the wait costs no second read. Small, so that the
/// waiting task's stack stays one or two pages.
pub const server_first_read_bytes = 512;

/// Bytes of chunk extensions one chunked request body may carry in all (nothing reads them;
/// a client sending more is wasting the server's time): past it, 400 and close.
pub const server_chunk_extensions_bytes_max = 1024;

/// Bytes of a chunked request body's trailer section: past it, 400 and close. Smaller than
/// the body buffer, which holds the section whole for std's parser.
pub const server_trailer_bytes_max = 2 * 1024;

/// Bytes of a request body its handler left unread that the server reads and drops to keep
/// the connection for the next request; with more left it closes the connection instead
/// (Go's net/http drops up to 256 KiB, nginx reads all; reading is dearer than a reconnect).
pub const server_body_skip_bytes_max = 64 * 1024;

/// Default wait for a keep-alive connection's next request before it is closed.
pub const server_idle_timeout_ns_default = 60 * std.time.ns_per_s;

/// Default time from a request's first byte to its complete head: a slow-header (trickle)
/// client is cut after it.
pub const server_header_timeout_ns_default = 10 * std.time.ns_per_s;

/// Default longest wait for the next bytes of a request body (between two reads, as nginx's
/// `client_body_timeout`, whose default it is): a stalled uploader is cut after it.
pub const server_body_timeout_ns_default = 60 * std.time.ns_per_s;

/// Default longest wait for the client to take more of a response (between two writes, as
/// nginx's `send_timeout`): a client that never reads is cut after it.
pub const server_send_timeout_ns_default = 60 * std.time.ns_per_s;

/// Default time a stopping server lets in-flight requests finish before cutting them.
pub const server_drain_timeout_ns_default = 5 * std.time.ns_per_s;

/// How long a stop keeps reading idle keep-alive connections by default: a request a client
/// sent just before or as the stop came (one round trip) is read and answered. Each idle
/// connection holds the stop this long; at most half the drain timeout is used.
pub const server_drain_idle_grace_ns_default = 1 * std.time.ns_per_s;

/// Longest the accept task waits for an idle connection it closed to admit a new one to give
/// its slot back (`Server.Options.when_full`); the new connection is refused after it. The
/// closed one only has to see the end of its stream, unless it was sent a request meanwhile.
pub const server_admission_wait_ns_max = 100 * std.time.ns_per_ms;

/// Bounds of the accept back-off under EMFILE/ENFILE/ENOMEM: it doubles from the first to
/// the last and resets after a successful accept, so a full fd table never spins the loop.
pub const server_accept_backoff_ns_min = 1 * std.time.ns_per_ms;
pub const server_accept_backoff_ns_max = 256 * std.time.ns_per_ms;

/// The kernel queue of a server's listener (capped by net.core.somaxconn).
pub const server_backlog = 1024;

/// Bounds of the forked supervisor's restart back-off. A worker that dies within
/// `server_restart_backoff_reset_ns` of its start is restarted after its slot's back-off,
/// which then doubles up to the maximum: a crash loop (a worker dying at its first request,
/// or at start-up) forks once per 5 s per slot instead of spinning, and the service is back
/// within 5 s of the cause going away. 100 ms first lets a one-off death (a worker killed by
/// hand, a passing shortage of fds at start) cost little; until a worker comes back its
/// connections wait in the shared listener's queue, they are not refused.
pub const server_restart_backoff_ns_min = 100 * std.time.ns_per_ms;
pub const server_restart_backoff_ns_max = 5 * std.time.ns_per_s;
/// A worker that ran this long before it died was not in a crash loop: it is restarted at
/// once and its slot's back-off starts over from the minimum. (Kubernetes resets a pod's
/// crash-loop back-off after 10 minutes; a weft worker starts in milliseconds, so a loop
/// shows within seconds.)
pub const server_restart_backoff_reset_ns = 10 * std.time.ns_per_s;

/// Worker threads a blocking lane may own: a lane is for blocking syscalls, whose parallelism
/// is bounded by the kernel and the devices, not by how many callers wait.
pub const lane_threads_max = 1024;

/// Default time a lane worker that ran out of jobs polls its queue before it parks. A caller
/// that submits jobs one after another (a fiber doing blocking calls in a loop) submits the
/// next one within a few microseconds of being woken; a worker still polling takes it without
/// the futex wake-up, which costs more than the job. 0 parks at once.
pub const lane_idle_spin_ns_default = 20 * std.time.ns_per_us;

/// Default time a caller of a lane polls its job's completion before it parks. A trivial job
/// (a `stat`, a short `read`) completes within a microsecond or two on a worker that was
/// awake; parking the fiber and waking it again through the executor's loop costs several
/// times that. The poll holds the caller's executor, so it stays short. 0 parks at once.
pub const lane_caller_spin_ns_default = 2 * std.time.ns_per_us;

/// Default stack of a lane worker thread (virtual; committed when touched). Blocking calls
/// from std (DNS, TLS, file system) and user code run there, so it is generous.
pub const lane_stack_size_bytes_default = 1024 * 1024;

/// Threads of the runtime's blocking lane (`fs/BlockingLane.zig`), which runs the file system
/// calls the loop cannot run asynchronously. Each blocked call holds one; a few cover a
/// program's occasional stat or readdir, and more would mostly queue on the same disk.
pub const blocking_lane_threads = 4;

/// Calls accepted by the blocking lane and not yet taken by a worker; callers past it wait in
/// line (they are never refused, see `fs/BlockingLane.zig`).
pub const blocking_lane_queue_limit = 256;

/// Bytes of a lane's name (`Lane.Options.name`), the longest kept: a longer name is cut (at a
/// character boundary). A name is a label in a table and in Prometheus series, not a sentence.
pub const lane_name_bytes_max = 32;

/// Named lanes (`Lane`, `Lane.Sharded`) alive at once in a process, at most: `weft.Metrics`
/// lists them from a fixed table, so a snapshot allocates nothing, and holds a copy of each
/// one's figures (about 750 bytes), so the table stays small. A program names a handful (a
/// database, DNS, files); past the limit `Lane.init` fails with `error.NamesExhausted`.
pub const lanes_named_max = 16;

/// Addresses one host name lookup reports at most; more (a long hosts file, a large reply)
/// are dropped. std's contract: a lookup into a queue of 16 never blocks, so the addresses and
/// the one canonical name must fit in 16 (a caller may fill the queue before reading it).
pub const dns_addresses_max = 15;

/// Bytes of a DNS reply over TCP that the resolver keeps per query (it lives on the looking-up
/// fiber's stack, one per query). A TCP reply may be 65,535 bytes; what lies past this is
/// skipped and the reply is cut after its last whole answer record (`dns.keepWholeAnswers`).
/// 2 KiB holds a question (at most 259 bytes), a CNAME chain of a few names and far more than
/// `dns_addresses_max` addresses (an AAAA record is 28 bytes compressed), so the cut only
/// loses records a lookup would drop anyway; 64 KiB per query would not fit small stacks.
pub const dns_tcp_message_bytes_max = 2048;

/// Highest nice value (lowest priority) Linux gives a thread.
pub const nice_max = 19;

/// A stall threshold (`Runtime.Options.stall_threshold_ns`) below this is refused: the
/// watchdog would wake too often to be free.
pub const stall_threshold_ns_min = std.time.ns_per_ms;

/// Default queue of the CPU lane: jobs accepted beyond its threads. Computation is measured
/// in milliseconds, so 256 queued jobs is already a long wait; callers past it wait in line.
pub const cpu_lane_queue_limit_default = 256;

/// Default callers that may wait for a CPU lane queue slot before `error.Overloaded`.
pub const cpu_lane_waiters_max_default = 4096;

/// Default nice increment of the CPU lane's threads: below the executors, so I/O wins a
/// contended CPU (nice 5 weighs about a third of nice 0 in Linux's scheduler), yet high
/// enough that the lane is not starved by other ordinary processes. 0 off Linux, where a nice
/// value is the process's, not a thread's (os/host.zig, `thread_tuning_supported`).
pub const cpu_lane_nice_default: u8 = if (builtin.os.tag == .linux) 5 else 0;

/// Default time slice of the CPU lane's threads in the kernel's scheduler: the shortest the
/// kernel accepts, so that an executor woken while every core computes preempts a lane thread
/// within about this long instead of the default slice (1.4 ms on 2 CPUs; lanes/CpuLane.zig).
/// Null off Linux, which has no custom slices.
pub const cpu_lane_slice_ns_default: ?u64 = if (builtin.os.tag == .linux)
    100 * std.time.ns_per_us
else
    null;

/// Resources one `weft.Registry` may hold. Its slots are allocated by `init` (each the
/// resource plus about 48 bytes) and live until `deinit`, so that a stale id never reaches
/// freed memory; past a few million a table is better split.
pub const registry_resources_max = 1 << 24;

/// Default callers one registry resource lets wait in its line. A resource serves one
/// transaction at a time, so a long line is latency the callers cannot see; failing early
/// with `error.WaitersFull` tells them.
pub const registry_waiters_max_default = 256;

comptime {
    assert(std.math.isPowerOfTwo(ring_entries));
    assert(dns_addresses_max + 1 <= 16); // + the canonical name
    assert(dns_addresses_max >= 2); // one of each family at least
    // A TCP reply is kept at least as long as any UDP one; the length prefix is 16 bits.
    assert(dns_tcp_message_bytes_max >= 512 and dns_tcp_message_bytes_max <= 65535);
    assert(dns_tcp_message_bytes_max >= 12 + 259 + dns_addresses_max * 28); // see above
    assert(reap_batch_max >= 8);
    assert(std.math.isPowerOfTwo(futex_buckets));
    assert(std.math.isPowerOfTwo(run_queue_len) and run_queue_len >= 4);
    assert(lifo_streak_max >= 1);
    assert(executor_search_ns < std.time.ns_per_ms); // a spin, not a busy executor
    assert(run_delay_window_ns > executor_search_ns); // a window spans several searches
    assert(run_delay_ratio_max >= 2);
    assert(run_delay_backoff_ns_min <= run_delay_backoff_ns_max);
    assert(retire_contention_ns_min > run_delay_window_ns); // several windows in a row
    assert(executors_max >= 1);
    assert(held_look_ns >= 10 * std.time.ns_per_us); // a look, not a spin
    assert(held_linger_ns > held_look_ns);
    assert(stack_size_bytes_default % std.heap.page_size_min == 0);
    assert(stack_size_bytes_min % std.heap.page_size_min == 0);
    assert(stack_size_bytes_min <= stack_size_bytes_default);
    assert(dispatches_per_poll > 0 and calls_per_yield > 0);
    assert(map_count_reserve < 65530);
    assert(server_workers_max > 0 and server_connections_max_default > 0);
    assert(server_head_bytes_max >= 1024);
    assert(server_buffer_bytes % std.heap.page_size_min == 0);
    assert(server_first_read_bytes <= server_head_bytes_max);
    assert(server_drain_idle_grace_ns_default <= server_drain_timeout_ns_default / 2);
    assert(server_accept_backoff_ns_min <= server_accept_backoff_ns_max);
    assert(server_restart_backoff_ns_min > 0); // doubling from 0 stays 0
    assert(server_restart_backoff_ns_min <= server_restart_backoff_ns_max);
    assert(server_header_timeout_ns_default <= server_idle_timeout_ns_default);
    // The trailer section, its final CRLF and the last chunk's line fit in the body buffer.
    assert(server_trailer_bytes_max + 64 <= server_body_buffer_bytes);
    assert(server_chunk_extensions_bytes_max < server_body_buffer_bytes);
    assert(lane_threads_max > 0);
    assert(lane_idle_spin_ns_default < std.time.ns_per_ms); // a poll, not a busy worker
    assert(lane_caller_spin_ns_default <= lane_idle_spin_ns_default); // the executor matters more
    assert(lane_stack_size_bytes_default % std.heap.page_size_min == 0);
    assert(signal_stack_size_bytes % std.heap.page_size_min == 0);
    assert(signal_stack_size_bytes >= 128 * 1024); // std's stack trace, run there too
    assert(blocking_lane_threads > 0 and blocking_lane_threads <= lane_threads_max);
    assert(blocking_lane_queue_limit >= blocking_lane_threads);
    assert(lane_name_bytes_max >= 8 and lane_name_bytes_max <= std.math.maxInt(u8));
    assert(lanes_named_max >= 1);

    assert(registry_resources_max < std.math.maxInt(u32)); // maxInt marks "no slot"
    assert(cpu_lane_nice_default <= nice_max);
    assert(cpu_lane_queue_limit_default > 0 and cpu_lane_waiters_max_default > 0);
    assert(registry_waiters_max_default > 0);
    assert(pool_spill_stacks > 0 and pool_spill_stacks <= pool_free_max); // a spill leaves some
    assert(pool_hot_stacks < pool_free_max); // a pool's hot set never spills
    assert(stack_trim_retry_ns < stack_idle_ns); // a cut-short sweep finishes within the period
    assert(stack_trim_batch_max > 0);
    assert(task_name_bytes_max % 8 == 0); // written and read as words (sched/LiveTasks.zig)
    assert(task_slots_max < std.math.maxInt(u32)); // slots are u32, maxInt ends the free list
    assert(task_dump_batch_max >= 1 and task_dump_frames_max >= 4);
}
