//! What keyed limits cost in memory, read from a counting global allocator: bytes per key at a
//! million keys, and memory flat under a churn of a million new keys a minute.
//!
//! The allocator counts every thread, so the tests here take turns (one lock). They are ignored
//! by default for their time (about 2 s and 10 s in release, a few times that in debug); run them
//! with `cargo test --release --test keyed_memory -- --ignored --nocapture`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sluicegate::clock::ManualClock;
use sluicegate::keyed::{KeyedLimiter, WhenFull};
use sluicegate::limit::GcraConfig;

/// Bytes allocated and not yet freed, and the most there were since the last reset.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::SeqCst) + by;
    PEAK.fetch_max(now, Ordering::SeqCst);
}

// SAFETY: every call is passed on to the system allocator unchanged; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

static TURN: Mutex<()> = Mutex::new(());

fn live() -> usize {
    LIVE.load(Ordering::SeqCst)
}

fn gcra(rate: u64, per: Duration, burst: u64) -> GcraConfig {
    GcraConfig { rate, per, burst }
}

const MILLION: u64 = 1_000_000;

/// Bytes per key beside the key, for `MILLION` keys made by `key`.
fn bytes_per_key<K: std::hash::Hash + Eq + Clone + Send + Sync + 'static>(
    key: impl Fn(u64) -> K,
) -> f64 {
    let clock = ManualClock::new();
    let before = live();
    let limiter = KeyedLimiter::<K>::builder(gcra(100, Duration::from_secs(1), 20))
        .max_keys(MILLION as usize)
        .build(clock)
        .unwrap();
    for i in 0..MILLION {
        limiter.try_acquire(&key(i), 1).unwrap();
    }
    // Each shard holds its share of the cap, so the last keys of a full table may already
    // replace others (here all in debt: at time 0 no key is full again).
    let held = limiter.len();
    assert!(held >= 990_000, "{held} keys held");
    let total = live() - before;
    let per_key = total as f64 / held as f64 - std::mem::size_of::<K>() as f64;
    println!(
        "{}: {total} bytes for {held} keys: {per_key:.1} bytes per key beside the key ({} bytes)",
        std::any::type_name::<K>(),
        std::mem::size_of::<K>()
    );
    drop(limiter);
    per_key
}

#[test]
#[ignore = "inserts 2 million keys: run in release with --ignored"]
fn a_million_keys_cost_at_most_64_bytes_each_beside_the_key() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let u64_keys = bytes_per_key(|i| i);
    let ip_keys = bytes_per_key(|i| IpAddr::V6(Ipv6Addr::from(u128::from(i) << 20)));
    println!("took {:?}", started.elapsed());
    assert!(u64_keys <= 64.0, "{u64_keys} bytes per u64 key");
    assert!(ip_keys <= 64.0, "{ip_keys} bytes per IpAddr key");
}

/// A million new keys a minute for `minutes` minutes on a limiter of 100 000 keys: the keys held
/// never exceed the cap, and once the cap is reached (within the first minute) no byte more is
/// held at any moment.
fn churn(config: GcraConfig, when_full: WhenFull, minutes: u64) {
    let clock = ManualClock::new();
    let before = live();
    let max_keys = 100_000;
    let limiter = KeyedLimiter::<u64>::builder(config)
        .max_keys(max_keys)
        .when_full(when_full)
        .build(clock.clone())
        .unwrap();
    let step = Duration::from_secs(60) / MILLION as u32;
    let mut at_cap = 0;
    for minute in 0..minutes {
        for i in 0..MILLION {
            clock.advance(step);
            let _ = limiter.try_acquire(&(minute * MILLION + i), 1);
        }
        let (len, bytes) = (limiter.len(), live());
        assert!(len <= max_keys, "{len} keys held, cap {max_keys}");
        println!(
            "minute {}: {len} keys, {} bytes held ({:.1} a key), peak {} ({:?})",
            minute + 1,
            bytes - before,
            (bytes - before) as f64 / len as f64,
            PEAK.load(Ordering::SeqCst) - before,
            limiter.stats()
        );
        if minute == 0 {
            at_cap = bytes;
            PEAK.store(bytes, Ordering::SeqCst);
        }
    }
    let peak = PEAK.load(Ordering::SeqCst);
    assert!(
        peak <= at_cap,
        "memory grew after the cap was reached: {peak} bytes at peak, {at_cap} at the cap"
    );
}

#[test]
#[ignore = "5 minutes of a million new keys each, twice: run in release with --ignored"]
fn memory_stays_flat_under_a_churn_of_a_million_new_keys_a_minute() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    // 100/s, burst 20: every key is full again 10 ms after its call, so room is made at no loss.
    churn(gcra(100, Duration::from_secs(1), 20), WhenFull::Evict, 5);
    // 1 a minute: every key is in debt for a minute, so each new key evicts one in use, or is
    // refused.
    churn(gcra(1, Duration::from_secs(60), 1), WhenFull::Evict, 5);
    churn(gcra(1, Duration::from_secs(60), 1), WhenFull::Refuse, 2);
    println!("took {:?}", started.elapsed());
}
