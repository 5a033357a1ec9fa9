//! The sync/channel rows, Tokio's side (weft implements the same definitions).
//!
//! Tasks await on both sides of every primitive; no OS thread blocks. Each row reports
//! `ns_per_op` (wall time of the timed region / ops, where one op is what the row's comment
//! says) and `alloc_bytes`/`allocs` (what the counting global allocator saw, on every thread,
//! during the timed region). Each row counts what it received (`received=` vs `expected=`),
//! so a lost message, a lost wake or a broken exclusion fails the row (`status=lost`).

use crate::{alloc, elapsed_ns, run_on, Line};
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{
    broadcast, mpsc, oneshot, watch, Barrier, Mutex, Notify, OnceCell, RwLock, Semaphore,
};

const MILLION: u64 = 1_000_000;
const HUNDRED_K: u64 = 100_000;

/// What a row measured.
pub struct Outcome {
    config: Vec<(&'static str, u64)>,
    ops: u64,
    wall_ns: u64,
    alloc_bytes: u64,
    allocs: u64,
    received: u64,
    expected: u64,
    /// A broken invariant other than a count (e.g. two holders of one permit).
    violation: Option<&'static str>,
}

/// Start of a timed region: the clock and the allocator's counters.
struct Timer {
    start: Instant,
    bytes: u64,
    count: u64,
}

impl Timer {
    fn start() -> Timer {
        let (bytes, count) = alloc::snapshot();
        Timer {
            start: Instant::now(),
            bytes,
            count,
        }
    }

    /// Ends the region; `received` must equal `expected` for the row to pass.
    /// The row's configuration words are attached afterwards (`Outcome::with`), so that building
    /// them is not counted as an allocation of the timed region.
    fn stop(self, ops: u64, received: u64, expected: u64) -> Outcome {
        let wall_ns = elapsed_ns(self.start);
        let (bytes, count) = alloc::snapshot();
        Outcome {
            config: Vec::new(),
            ops,
            wall_ns,
            alloc_bytes: bytes - self.bytes,
            allocs: count - self.count,
            received,
            expected,
            violation: None,
        }
    }
}

impl Outcome {
    fn with(mut self, config: &[(&'static str, u64)]) -> Outcome {
        self.config = config.to_vec();
        self
    }
}

type Row = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// A row's name and the function that starts its body.
pub type RowEntry = (&'static str, fn() -> Row);

/// Every row, in the order of bench/sync.zig's header.
pub static ROWS: &[RowEntry] = &[
    ("sync_mutex_uncontended", || Box::pin(mutex_uncontended())),
    ("sync_rwlock_read", || Box::pin(rwlock_read())),
    ("sync_rwlock_write", || Box::pin(rwlock_write())),
    ("sync_semaphore_uncontended", || {
        Box::pin(semaphore_uncontended())
    }),
    ("sync_oncecell_get", || Box::pin(oncecell_get())),
    ("sync_oncecell_set", || Box::pin(oncecell_set())),
    ("sync_notify", || Box::pin(notify())),
    ("sync_barrier", || Box::pin(barrier())),
    ("sync_channel_send", || Box::pin(channel_send())),
    ("sync_channel_recv", || Box::pin(channel_recv())),
    ("sync_channel_roundtrip", || Box::pin(channel_roundtrip())),
    ("sync_oneshot", || Box::pin(oneshot_rows())),
    ("sync_broadcast", || Box::pin(broadcast_row())),
    ("sync_watch", || Box::pin(watch_row())),
    ("sync_mpmc", || Box::pin(mpmc())),
    ("sync_mutex_contended", || Box::pin(mutex_contended())),
    ("sync_rwlock_contended", || Box::pin(rwlock_contended())),
    ("sync_semaphore_contended", || {
        Box::pin(semaphore_contended())
    }),
    ("sync_select", || Box::pin(select_row())),
];

pub fn run(row: &RowEntry, threads: usize) -> ! {
    alloc::enable();
    let outcome = run_on(threads, (row.1)());
    let mut line = Line::new(row.0, threads);
    for (key, value) in &outcome.config {
        line.config(key, &value.to_string());
    }
    line.int("ops", outcome.ops)
        .int("wall_ns", outcome.wall_ns)
        .float(
            "ns_per_op",
            outcome.wall_ns as f64 / outcome.ops.max(1) as f64,
        )
        .int("alloc_bytes", outcome.alloc_bytes)
        .int("allocs", outcome.allocs)
        .int("received", outcome.received)
        .int("expected", outcome.expected);
    if outcome.received != outcome.expected {
        line.fail("lost", "received_differs_from_expected");
    }
    if let Some(violation) = outcome.violation {
        line.fail("failed", violation);
    }
    line.print_and_exit()
}

fn sum_below(n: u64) -> u64 {
    n * n.saturating_sub(1) / 2
}

/// Row 1: One task, 1M × (lock, increment the guarded counter, unlock) of tokio::sync::Mutex.
async fn mutex_uncontended() -> Outcome {
    let mutex = Mutex::new(0u64);
    let timer = Timer::start();
    for _ in 0..MILLION {
        *black_box(&mutex).lock().await += 1;
    }
    let counted = *mutex.lock().await;
    timer.stop(MILLION, counted, MILLION).with(&[("tasks", 1)])
}

/// Row 2: One task, 1M × (read lock, read, unlock) of tokio::sync::RwLock.
async fn rwlock_read() -> Outcome {
    let lock = RwLock::new(1u64);
    let timer = Timer::start();
    let mut sum = 0;
    for _ in 0..MILLION {
        sum += *black_box(&lock).read().await;
    }
    timer.stop(MILLION, sum, MILLION).with(&[("tasks", 1)])
}

/// Row 3: One task, 1M × (write lock, increment, unlock).
async fn rwlock_write() -> Outcome {
    let lock = RwLock::new(0u64);
    let timer = Timer::start();
    for _ in 0..MILLION {
        *black_box(&lock).write().await += 1;
    }
    let counted = *lock.read().await;
    timer.stop(MILLION, counted, MILLION).with(&[("tasks", 1)])
}

/// Row 4: One task, 1M × (acquire one permit of a 1-permit Semaphore, release it).
async fn semaphore_uncontended() -> Outcome {
    let semaphore = Semaphore::new(1);
    let timer = Timer::start();
    let mut held = 0;
    for _ in 0..MILLION {
        let permit = black_box(&semaphore)
            .acquire()
            .await
            .expect("semaphore closed");
        held += 1;
        drop(permit);
    }
    timer
        .stop(MILLION, held, MILLION)
        .with(&[("tasks", 1), ("permits", 1)])
}

/// Row 5: One task, 1M × get of an initialised tokio::sync::OnceCell.
async fn oncecell_get() -> Outcome {
    let cell = OnceCell::new();
    cell.set(1u64).expect("fresh cell");
    let timer = Timer::start();
    let mut sum = 0;
    for _ in 0..MILLION {
        sum += black_box(*black_box(&cell).get().expect("initialised"));
    }
    timer.stop(MILLION, sum, MILLION).with(&[("tasks", 1)])
}

/// Row 6: One task, 1M × (fresh OnceCell, get_or_init with an async initialiser returning i).
async fn oncecell_set() -> Outcome {
    let timer = Timer::start();
    let mut sum = 0;
    for i in 0..MILLION {
        let cell = black_box(OnceCell::new());
        sum += *cell.get_or_init(|| async move { i }).await;
    }
    timer
        .stop(MILLION, sum, sum_below(MILLION))
        .with(&[("tasks", 1)])
}

/// Row 7: One task, 1M × (notify_one, then notified().await, which consumes the stored permit).
async fn notify() -> Outcome {
    let notify = Notify::new();
    let timer = Timer::start();
    let mut woken = 0;
    for _ in 0..MILLION {
        black_box(&notify).notify_one();
        notify.notified().await;
        woken += 1;
    }
    timer.stop(MILLION, woken, MILLION).with(&[("tasks", 1)])
}

/// Row 8: Four tasks, a Barrier of 4, 100k generations; one op = one generation. Received counts
/// the leaders (exactly one per generation).
async fn barrier() -> Outcome {
    const TASKS: u64 = 4;
    let barrier = Arc::new(Barrier::new(TASKS as usize));
    let timer = Timer::start();
    let mut handles = Vec::new();
    for _ in 0..TASKS {
        let barrier = barrier.clone();
        handles.push(tokio::spawn(async move {
            let mut leaders = 0u64;
            for _ in 0..HUNDRED_K {
                if barrier.wait().await.is_leader() {
                    leaders += 1;
                }
            }
            leaders
        }));
    }
    let mut leaders = 0;
    for handle in handles {
        leaders += handle.await.expect("barrier task panicked");
    }
    timer
        .stop(HUNDRED_K, leaders, HUNDRED_K)
        .with(&[("tasks", TASKS), ("generations", HUNDRED_K)])
}

/// Row 9: tokio::sync::mpsc bounded at 100k, one task: 100k sends into the empty channel (timed);
/// then the 100k are drained (untimed) and checked.
async fn channel_send() -> Outcome {
    let (tx, mut rx) = mpsc::channel::<u64>(HUNDRED_K as usize);
    let timer = Timer::start();
    for i in 0..HUNDRED_K {
        black_box(&tx).send(i).await.expect("receiver alive");
    }
    let mut outcome = timer
        .stop(HUNDRED_K, 0, sum_below(HUNDRED_K))
        .with(&[("capacity", HUNDRED_K)]);
    let mut sum = 0;
    for _ in 0..HUNDRED_K {
        sum += rx.recv().await.expect("value sent");
    }
    outcome.received = sum;
    outcome
}

/// Row 10: The same channel filled with 100k values (untimed), then drained by 100k recv (timed).
async fn channel_recv() -> Outcome {
    let (tx, mut rx) = mpsc::channel::<u64>(HUNDRED_K as usize);
    for i in 0..HUNDRED_K {
        tx.send(i).await.expect("receiver alive");
    }
    let timer = Timer::start();
    let mut sum = 0;
    for _ in 0..HUNDRED_K {
        sum += black_box(&mut rx).recv().await.expect("value sent");
    }
    timer
        .stop(HUNDRED_K, sum, sum_below(HUNDRED_K))
        .with(&[("capacity", HUNDRED_K)])
}

/// Row 11: Two tasks, two capacity-1 mpsc channels, 100k round trips (i out, i + 1 back); one op =
/// one round trip. Received counts the correct replies.
async fn channel_roundtrip() -> Outcome {
    let (ping_tx, mut ping_rx) = mpsc::channel::<u64>(1);
    let (pong_tx, mut pong_rx) = mpsc::channel::<u64>(1);
    let timer = Timer::start();
    let ponger = tokio::spawn(async move {
        while let Some(value) = ping_rx.recv().await {
            if pong_tx.send(value + 1).await.is_err() {
                return;
            }
        }
    });
    let pinger = tokio::spawn(async move {
        let mut ok = 0;
        for i in 0..HUNDRED_K {
            ping_tx.send(i).await.expect("ponger alive");
            if pong_rx.recv().await == Some(i + 1) {
                ok += 1;
            }
        }
        ok
    });
    let ok = pinger.await.expect("pinger panicked");
    ponger.await.expect("ponger panicked");
    timer
        .stop(HUNDRED_K, ok, HUNDRED_K)
        .with(&[("tasks", 2), ("capacity", 1)])
}

/// Row 12: One task, 1M × (create a oneshot, send i, await the receiver).
async fn oneshot_rows() -> Outcome {
    let timer = Timer::start();
    let mut sum = 0;
    for i in 0..MILLION {
        let (tx, rx) = oneshot::channel::<u64>();
        black_box(tx).send(i).expect("receiver alive");
        sum += rx.await.expect("value sent");
    }
    timer
        .stop(MILLION, sum, sum_below(MILLION))
        .with(&[("tasks", 1)])
}

/// Row 13: One sender task, 4 receiver tasks, broadcast capacity 1024, 100k messages; one op = one
/// message sent (and received by all four). Tokio's broadcast send never waits, so the sender
/// applies backpressure itself: it never runs more than `capacity` messages ahead of the
/// slowest receiver (each receiver publishes how many it has taken; the sender yields while
/// it is a full buffer ahead). A receiver that still lags counts the skipped messages, and the
/// row fails (`status=lost`): received must be exactly 4 × 100k, and the values must sum up.
async fn broadcast_row() -> Outcome {
    const RECEIVERS: usize = 4;
    const CAPACITY: u64 = 1024;
    let (tx, _) = broadcast::channel::<u64>(CAPACITY as usize);
    let progress: Arc<Vec<AtomicU64>> =
        Arc::new((0..RECEIVERS).map(|_| AtomicU64::new(0)).collect());
    let mut receivers = Vec::new();
    let timer = Timer::start();
    for r in 0..RECEIVERS {
        let mut rx = tx.subscribe();
        let progress = progress.clone();
        receivers.push(tokio::spawn(async move {
            let (mut count, mut sum, mut lagged) = (0u64, 0u64, 0u64);
            loop {
                match rx.recv().await {
                    Ok(value) => {
                        count += 1;
                        sum += value;
                        progress[r].store(count, Relaxed);
                    }
                    Err(broadcast::error::RecvError::Lagged(skipped)) => lagged += skipped,
                    Err(broadcast::error::RecvError::Closed) => return (count, sum, lagged),
                }
            }
        }));
    }
    let sender = {
        let progress = progress.clone();
        tokio::spawn(async move {
            let slowest = || progress.iter().map(|p| p.load(Relaxed)).min().unwrap_or(0);
            let mut floor = 0;
            for i in 0..HUNDRED_K {
                if i - floor >= CAPACITY {
                    floor = slowest();
                    while i - floor >= CAPACITY {
                        tokio::task::yield_now().await;
                        floor = slowest();
                    }
                }
                tx.send(i).expect("receivers alive");
            }
            // Dropping tx closes the channel once the receivers have drained it.
        })
    };
    sender.await.expect("sender panicked");
    let (mut count, mut sum, mut lagged) = (0, 0, 0);
    for receiver in receivers {
        let (c, s, l) = receiver.await.expect("receiver panicked");
        count += c;
        sum += s;
        lagged += l;
    }
    let mut outcome = timer
        .stop(HUNDRED_K, count, RECEIVERS as u64 * HUNDRED_K)
        .with(&[
            ("senders", 1),
            ("receivers", RECEIVERS as u64),
            ("capacity", CAPACITY),
        ]);
    if lagged > 0 {
        // received is already short of expected; say why.
        outcome.violation = Some("receiver_lagged");
    } else if sum != RECEIVERS as u64 * sum_below(HUNDRED_K) {
        outcome.violation = Some("value_sum_mismatch");
    }
    outcome
}

/// Row 14: One task, 1M × (watch send i, borrow and read the current value).
async fn watch_row() -> Outcome {
    let (tx, rx) = watch::channel(0u64);
    let timer = Timer::start();
    let mut sum = 0;
    for i in 0..MILLION {
        black_box(&tx).send(i).expect("receiver alive");
        sum += *black_box(&rx).borrow();
    }
    timer
        .stop(MILLION, sum, sum_below(MILLION))
        .with(&[("tasks", 1)])
}

/// Row 15: Four producers and four consumers on one bounded MPMC channel of capacity 1000
/// (async-channel; Tokio has none), 100k messages per producer; one op = one message. The
/// consumers' counts must sum to 400k and their values to the sum of everything sent.
async fn mpmc() -> Outcome {
    const PRODUCERS: u64 = 4;
    const CONSUMERS: u64 = 4;
    let (tx, rx) = async_channel::bounded::<u64>(1000);
    let total = PRODUCERS * HUNDRED_K;
    let timer = Timer::start();
    let mut consumers = Vec::new();
    for _ in 0..CONSUMERS {
        let rx = rx.clone();
        consumers.push(tokio::spawn(async move {
            let (mut count, mut sum) = (0u64, 0u64);
            while let Ok(value) = rx.recv().await {
                count += 1;
                sum += value;
            }
            (count, sum)
        }));
    }
    drop(rx);
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let tx = tx.clone();
        producers.push(tokio::spawn(async move {
            for i in 0..HUNDRED_K {
                tx.send(p * HUNDRED_K + i).await.expect("consumers alive");
            }
        }));
    }
    drop(tx);
    for producer in producers {
        producer.await.expect("producer panicked");
    }
    let (mut count, mut sum) = (0, 0);
    for consumer in consumers {
        let (c, s) = consumer.await.expect("consumer panicked");
        count += c;
        sum += s;
    }
    let mut outcome = timer.stop(total, count, total).with(&[
        ("producers", PRODUCERS),
        ("consumers", CONSUMERS),
        ("capacity", 1000),
    ]);
    if sum != sum_below(total) {
        outcome.violation = Some("value_sum_mismatch");
    }
    outcome
}

/// Row 16: Four tasks each 250k × (lock, increment, unlock) of one Mutex; the counter must be 1M.
/// In the three contended rows every task first waits at a start barrier of all of them, as on
/// weft's side (bench/sync.zig), so that the tasks run at once.
async fn mutex_contended() -> Outcome {
    const TASKS: u64 = 4;
    const EACH: u64 = 250_000;
    let mutex = Arc::new(Mutex::new(0u64));
    let gate = Arc::new(Barrier::new(TASKS as usize));
    let timer = Timer::start();
    let handles: Vec<_> = (0..TASKS)
        .map(|_| {
            let (mutex, gate) = (mutex.clone(), gate.clone());
            tokio::spawn(async move {
                gate.wait().await;
                for _ in 0..EACH {
                    *mutex.lock().await += 1;
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.expect("task panicked");
    }
    let counted = *mutex.lock().await;
    timer
        .stop(TASKS * EACH, counted, TASKS * EACH)
        .with(&[("tasks", TASKS)])
}

/// Row 17: Four reader tasks and two writer tasks on one RwLock, 100k ops each (a read: lock and
/// read the value; a write: lock and increment); one op = one lock+unlock (600k). Received
/// counts the reads that saw a value no smaller than the previous one plus the final counter
/// (200k increments).
async fn rwlock_contended() -> Outcome {
    const READERS: u64 = 4;
    const WRITERS: u64 = 2;
    let lock = Arc::new(RwLock::new(0u64));
    let gate = Arc::new(Barrier::new((READERS + WRITERS) as usize));
    let timer = Timer::start();
    let mut readers = Vec::new();
    let mut writers = Vec::new();
    for _ in 0..WRITERS {
        let (lock, gate) = (lock.clone(), gate.clone());
        writers.push(tokio::spawn(async move {
            gate.wait().await;
            for _ in 0..HUNDRED_K {
                *lock.write().await += 1;
            }
        }));
    }
    for _ in 0..READERS {
        let (lock, gate) = (lock.clone(), gate.clone());
        readers.push(tokio::spawn(async move {
            gate.wait().await;
            let (mut ok, mut last) = (0u64, 0u64);
            for _ in 0..HUNDRED_K {
                let value = *lock.read().await;
                if value >= last {
                    ok += 1;
                }
                last = value;
            }
            ok
        }));
    }
    for writer in writers {
        writer.await.expect("writer panicked");
    }
    let mut received = 0;
    for reader in readers {
        received += reader.await.expect("reader panicked");
    }
    received += *lock.read().await;
    let ops = (READERS + WRITERS) * HUNDRED_K;
    timer
        .stop(ops, received, ops)
        .with(&[("readers", READERS), ("writers", WRITERS)])
}

/// Row 18: Eight tasks, a Semaphore of 2 permits, 100k × (acquire one, release) each; one op = one
/// acquire+release (800k). The row checks that no more than 2 tasks ever hold a permit.
async fn semaphore_contended() -> Outcome {
    const TASKS: u64 = 8;
    const PERMITS: u64 = 2;
    let semaphore = Arc::new(Semaphore::new(PERMITS as usize));
    let holders = Arc::new(AtomicU64::new(0));
    let excess = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(Barrier::new(TASKS as usize));
    let timer = Timer::start();
    let handles: Vec<_> = (0..TASKS)
        .map(|_| {
            let (semaphore, holders, excess) = (semaphore.clone(), holders.clone(), excess.clone());
            let gate = gate.clone();
            tokio::spawn(async move {
                gate.wait().await;
                let mut held = 0u64;
                for _ in 0..HUNDRED_K {
                    let permit = semaphore.acquire().await.expect("semaphore closed");
                    if holders.fetch_add(1, Relaxed) >= PERMITS {
                        excess.fetch_add(1, Relaxed);
                    }
                    held += 1;
                    holders.fetch_sub(1, Relaxed);
                    drop(permit);
                }
                held
            })
        })
        .collect();
    let mut held = 0;
    for handle in handles {
        held += handle.await.expect("task panicked");
    }
    let ops = TASKS * HUNDRED_K;
    let mut outcome = timer
        .stop(ops, held, ops)
        .with(&[("tasks", TASKS), ("permits", PERMITS)]);
    if excess.load(Relaxed) > 0 {
        outcome.violation = Some("more_holders_than_permits");
    }
    outcome
}

/// Row 19 (beyond the 18): two producer tasks send 50k each into their own mpsc channel
/// (capacity 1024); one consumer task `tokio::select!`s over both receivers, disabling a branch
/// once its channel is closed and drained; one op = one message. Received counts the messages
/// (100k), and the values must sum up.
async fn select_row() -> Outcome {
    const EACH: u64 = 50_000;
    const CAPACITY: usize = 1024;
    let (tx_a, mut rx_a) = mpsc::channel::<u64>(CAPACITY);
    let (tx_b, mut rx_b) = mpsc::channel::<u64>(CAPACITY);
    let timer = Timer::start();
    let consumer = tokio::spawn(async move {
        let (mut count, mut sum) = (0u64, 0u64);
        let (mut a_open, mut b_open) = (true, true);
        while a_open || b_open {
            let received = tokio::select! {
                value = rx_a.recv(), if a_open => value.or_else(|| { a_open = false; None }),
                value = rx_b.recv(), if b_open => value.or_else(|| { b_open = false; None }),
            };
            if let Some(value) = received {
                count += 1;
                sum += value;
            }
        }
        (count, sum)
    });
    let producers: Vec<_> = [(0u64, tx_a), (1u64, tx_b)]
        .into_iter()
        .map(|(id, tx)| {
            tokio::spawn(async move {
                for i in 0..EACH {
                    tx.send(id * EACH + i).await.expect("consumer alive");
                }
                // Dropping tx closes the channel.
            })
        })
        .collect();
    for producer in producers {
        producer.await.expect("producer panicked");
    }
    let (count, sum) = consumer.await.expect("consumer panicked");
    let mut outcome = timer.stop(2 * EACH, count, 2 * EACH).with(&[
        ("producers", 2),
        ("consumers", 1),
        ("capacity", CAPACITY as u64),
    ]);
    if sum != sum_below(2 * EACH) {
        outcome.violation = Some("value_sum_mismatch");
    }
    outcome
}
