//! Image cleanup's loop (`berth_engine::image_gc::ImageGc`) on the fake runtime: a cycle removes
//! at most N images, least recently used first; a disk-pressure pass frees down to the low
//! threshold and no further; passes run one at a time, whoever asks. Time is tokio's paused
//! clock where the loop's ticks matter. The agent's wiring of the same loop runs on the real
//! Engine in `crates/berth/tests/image_gc_engine.rs`.

use berth_engine::BoxError;
use berth_engine::fake::FakeRuntime;
use berth_engine::image_gc::{
    Config, DiskUsage, Given, ImageGc, Mode, Observer, Removed, Request, Usage,
};
use berth_engine::image_use::{
    ImageLeases, ImageRecordError, ImageRecords, MemoryImageRecords, TrackedImage,
};
use berth_engine::report::Report;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the observer was told: (trigger, image id, removed).
#[derive(Default)]
struct Seen(Mutex<Vec<(&'static str, String, bool)>>);

impl Seen {
    fn all(&self) -> Vec<(&'static str, String, bool)> {
        self.0.lock().expect("lock").clone()
    }
}

impl Observer for Seen {
    fn removed(&self, mode: Mode, outcome: &Removed, report: &Report) {
        assert!(matches!(report, Report::ImageRemoved { .. }), "{report:?}");
        self.0
            .lock()
            .expect("lock")
            .push((mode.trigger(), outcome.image_id.clone(), true));
    }
    fn not_removed(&self, mode: Mode, outcome: &Removed) {
        self.0
            .lock()
            .expect("lock")
            .push((mode.trigger(), outcome.image_id.clone(), false));
    }
}

/// `n` images `img<i>:1` of `size` bytes, tracked, image i last used at i + 1 (img0 the least
/// recently used).
fn images(n: usize, size: u64) -> (FakeRuntime, Arc<MemoryImageRecords>) {
    let rt = FakeRuntime::new();
    let records = Arc::new(MemoryImageRecords::default());
    for i in 0..n {
        let name = format!("img{i}:1");
        rt.add_image_sized(&name, size);
        records
            .used(&name, "t", i64::try_from(i).expect("small") + 1)
            .expect("used");
    }
    (rt, records)
}

fn config(per_cycle: i64, interval: Duration) -> Config {
    Config::new(Request {
        interval: Given::Option(interval),
        minimum_age: Duration::ZERO,
        per_cycle: Given::Option(per_cycle),
        check_interval: Duration::from_secs(1),
        ..Request::default()
    })
    .expect("config")
}

fn id(i: usize) -> String {
    FakeRuntime::image_id(&format!("img{i}:1"))
}

/// Wait (on tokio's clock) until `seen` holds `n` outcomes.
async fn until_seen(seen: &Seen, n: usize) {
    for _ in 0..10_000 {
        if seen.all().len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} outcomes expected, seen {:?}", seen.all());
}

#[tokio::test(start_paused = true)]
async fn a_cycle_removes_at_most_n_least_recently_used_first() {
    let (rt, records) = images(5, 100);
    let seen = Arc::new(Seen::default());
    let gc = Arc::new(
        ImageGc::new(
            Arc::new(rt.clone()),
            records.clone(),
            ImageLeases::new(),
            config(2, Duration::from_secs(60)),
        )
        .with_observer(seen.clone()),
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn(gc.clone().run(true, Vec::new, stop.clone()));

    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(seen.all().is_empty(), "nothing before the first interval");
    until_seen(&seen, 2).await;
    assert_eq!(
        seen.all(),
        [("cycle", id(0), true), ("cycle", id(1), true)],
        "two at most, the least recently used first"
    );
    assert_eq!(rt.images(), ["img2:1", "img3:1", "img4:1"]);
    let tracked: Vec<String> = records
        .tracked()
        .expect("tracked")
        .into_iter()
        .map(|t| t.reference)
        .collect();
    assert_eq!(
        tracked,
        ["img2:1", "img3:1", "img4:1"],
        "the removed are forgotten"
    );

    until_seen(&seen, 4).await;
    assert_eq!(
        seen.all()[2..],
        [("cycle", id(2), true), ("cycle", id(3), true)]
    );
    until_seen(&seen, 5).await;
    assert_eq!(rt.images(), Vec::<String>::new());
    stop.cancel();
    run.await.expect("the loop ends when stopped");
}

/// A file system of 2000 bytes: 1500 used by other things, and the fake's images.
struct Disk(FakeRuntime, u64);

impl DiskUsage for Disk {
    fn root(&self) -> &Path {
        Path::new("/fake/data-root")
    }
    fn measure(&self) -> Result<Usage, BoxError> {
        let images = u64::try_from(self.0.images().len()).expect("small");
        Ok(Usage {
            used: 1500 + images * self.1,
            capacity: 2000,
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_pressure_pass_frees_down_to_the_low_threshold_and_no_further() {
    // 6 images of 40: 1740 of 2000 used (87 % > 85 %); 80 % is 1600, so 140 bytes must go:
    // four images (160), the least recently used.
    let (rt, records) = images(6, 40);
    let seen = Arc::new(Seen::default());
    let gc = Arc::new(
        ImageGc::new(
            Arc::new(rt.clone()),
            records,
            ImageLeases::new(),
            config(1, Duration::from_secs(3600)),
        )
        .with_disk(Arc::new(Disk(rt.clone(), 40)))
        .with_observer(seen.clone()),
    );
    assert_eq!(gc.disk_root(), Some(Path::new("/fake/data-root")));
    let stop = CancellationToken::new();
    let run = tokio::spawn(gc.clone().run(false, Vec::new, stop.clone()));
    until_seen(&seen, 4).await;
    let removed: Vec<String> = seen.all().into_iter().map(|(_, id, _)| id).collect();
    assert_eq!(removed, [id(0), id(1), id(2), id(3)]);
    assert!(
        seen.all()
            .iter()
            .all(|(t, _, ok)| *t == "disk-pressure" && *ok),
        "{:?}",
        seen.all()
    );
    // 1580 of 2000 now (79 %): later checks find no pressure, and the cycle is off.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(seen.all().len(), 4, "{:?}", seen.all());
    assert_eq!(rt.images(), ["img4:1", "img5:1"]);
    stop.cancel();
    run.await.expect("stopped");
}

/// Records whose full read takes a while and counts how many run at once.
#[derive(Default)]
struct SlowRecords {
    inner: MemoryImageRecords,
    now: AtomicUsize,
    most: AtomicUsize,
    reads: AtomicUsize,
}

impl ImageRecords for SlowRecords {
    fn used(&self, image: &str, task: &str, at: i64) -> Result<(), ImageRecordError> {
        self.inner.used(image, task, at)
    }
    fn tracked(&self) -> Result<Vec<TrackedImage>, ImageRecordError> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.reads.fetch_add(1, Ordering::SeqCst);
        // A blocking read, as the store's is: the pass's worker thread waits.
        std::thread::sleep(Duration::from_millis(50));
        self.now.fetch_sub(1, Ordering::SeqCst);
        self.inner.tracked()
    }
    fn identify(&self, reference: &str, id: &str, size: u64) -> Result<(), ImageRecordError> {
        self.inner.identify(reference, id, size)
    }
    fn forget(&self, reference: &str) -> Result<(), ImageRecordError> {
        self.inner.forget(reference)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn passes_run_one_at_a_time() {
    let rt = FakeRuntime::new();
    let records = Arc::new(SlowRecords::default());
    for i in 0..4 {
        let name = format!("img{i}:1");
        rt.add_image_sized(&name, 10);
        records.used(&name, "t", 1).expect("used");
    }
    let gc = Arc::new(ImageGc::new(
        Arc::new(rt.clone()),
        records.clone(),
        ImageLeases::new(),
        config(1, Duration::from_secs(3600)),
    ));
    let passes: Vec<_> = (0..4)
        .map(|i| {
            let gc = gc.clone();
            let mode = if i % 2 == 0 { Mode::Cycle } else { Mode::Prune };
            tokio::spawn(async move { gc.pass(mode, Vec::new(), false).await })
        })
        .collect();
    let mut removed = 0;
    for p in passes {
        removed += p.await.expect("joined").expect("pass").removed.len();
    }
    assert_eq!(records.reads.load(Ordering::SeqCst), 4, "four surveys");
    assert_eq!(
        records.most.load(Ordering::SeqCst),
        1,
        "never two passes at once"
    );
    assert_eq!(removed, 4, "each image removed once, by one pass");
    assert!(rt.images().is_empty());
}
