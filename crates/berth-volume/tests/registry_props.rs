//! Property test of the reference registry against a simple model: random Create, Remove, Mount,
//! Unmount sequences across volumes and mount IDs, with saves that fail for stretches.
//!
//! After every step: the registry's counts equal the model's; a volume is mounted exactly when its
//! total count is positive; Remove is refused while the count is positive; the mounter never mounts
//! a mounted path or unmounts an unmounted one; and when saves work, the saved file holds exactly
//! the model.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use berth_volume::mounter::{Mounter, MounterError};
use berth_volume::options::Backend;
use berth_volume::persist::{Persister, SaveError};
use berth_volume::{Error, Registry};
use proptest::prelude::*;

#[derive(Default)]
struct FakeMounter {
    mounted: Mutex<BTreeSet<PathBuf>>,
    violations: Mutex<Vec<String>>,
}

impl Mounter for FakeMounter {
    fn mount(&self, _: &Backend, target: &Path) -> Result<(), MounterError> {
        if !self.mounted.lock().unwrap().insert(target.to_path_buf()) {
            self.violations
                .lock()
                .unwrap()
                .push(format!("mounted twice: {}", target.display()));
        }
        Ok(())
    }
    fn unmount(&self, _: &Backend, target: &Path) -> Result<(), MounterError> {
        if !self.mounted.lock().unwrap().remove(target) {
            self.violations
                .lock()
                .unwrap()
                .push(format!("unmounted twice: {}", target.display()));
        }
        Ok(())
    }
    fn mount_points(&self) -> Result<Vec<PathBuf>, MounterError> {
        Ok(self.mounted.lock().unwrap().iter().cloned().collect())
    }
    fn check_available(&self, _: &Backend) -> Result<(), MounterError> {
        Ok(())
    }
}

#[derive(Default)]
struct MemoryStore {
    fail: AtomicBool,
    saved: Mutex<Option<Vec<u8>>>,
}

impl Persister for MemoryStore {
    fn save(&self, bytes: &[u8]) -> Result<(), SaveError> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(SaveError {
                op: "writing",
                path: "memory".into(),
                kind: std::io::ErrorKind::ReadOnlyFilesystem,
                message: "injected failure".into(),
            });
        }
        *self.saved.lock().unwrap() = Some(bytes.to_vec());
        Ok(())
    }
}

#[derive(Debug, Clone)]
enum Op {
    Create(usize),
    Remove(usize),
    Mount(usize, usize),
    Unmount(usize, usize),
    FailSaves(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..3usize).prop_map(Op::Create),
        1 => (0..3usize).prop_map(Op::Remove),
        5 => (0..3usize, 0..4usize).prop_map(|(v, i)| Op::Mount(v, i)),
        5 => (0..3usize, 0..4usize).prop_map(|(v, i)| Op::Unmount(v, i)),
        1 => any::<bool>().prop_map(Op::FailSaves),
    ]
}

type Model = BTreeMap<String, BTreeMap<String, u64>>;

fn total(m: &BTreeMap<String, u64>) -> u64 {
    m.values().sum()
}

async fn play(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mounter = Arc::new(FakeMounter::default());
    let store = Arc::new(MemoryStore::default());
    let registry = Registry::new(
        Default::default(),
        dir.path(),
        Arc::clone(&mounter) as Arc<dyn Mounter>,
        Arc::clone(&store) as Arc<dyn Persister>,
    )
    .unwrap();
    let mut model = Model::new();
    let mut failing = false;
    let opts = || BTreeMap::from([("type".to_owned(), "tmpfs".to_owned())]);
    for op in ops {
        match op {
            Op::FailSaves(f) => {
                failing = f;
                store.fail.store(f, Ordering::SeqCst);
            }
            Op::Create(v) => {
                let name = format!("v{v}");
                let r = registry.create(&name, opts()).await;
                match model.entry(name) {
                    std::collections::btree_map::Entry::Occupied(_) => prop_assert!(r.is_ok()),
                    std::collections::btree_map::Entry::Vacant(_) if failing => {
                        prop_assert!(matches!(r, Err(Error::Save { .. })), "{r:?}")
                    }
                    std::collections::btree_map::Entry::Vacant(slot) => {
                        prop_assert!(r.is_ok(), "{r:?}");
                        slot.insert(BTreeMap::new());
                    }
                }
            }
            Op::Remove(v) => {
                let name = format!("v{v}");
                let r = registry.remove(&name).await;
                match model.get(&name) {
                    None => prop_assert!(matches!(r, Err(Error::NoSuchVolume(_))), "{r:?}"),
                    Some(m) if total(m) > 0 => {
                        prop_assert!(matches!(r, Err(Error::InUse { .. })), "{r:?}")
                    }
                    Some(_) => {
                        // Removal stands even when the save fails.
                        prop_assert_eq!(r.is_ok(), !failing, "{:?}", r);
                        model.remove(&name);
                    }
                }
            }
            Op::Mount(v, i) => {
                let (name, id) = (format!("v{v}"), format!("id{i}"));
                let r = registry.mount(&name, &id).await;
                match model.get_mut(&name) {
                    None => prop_assert!(matches!(r, Err(Error::NoSuchVolume(_))), "{r:?}"),
                    Some(m) => {
                        let fresh = !m.contains_key(&id);
                        if failing {
                            prop_assert!(matches!(r, Err(Error::Save { .. })), "{r:?}");
                            if !fresh {
                                *m.get_mut(&id).unwrap() += 1; // the increment stands
                            }
                        } else {
                            prop_assert!(r.is_ok(), "{r:?}");
                            *m.entry(id).or_insert(0) += 1;
                        }
                    }
                }
            }
            Op::Unmount(v, i) => {
                let (name, id) = (format!("v{v}"), format!("id{i}"));
                let r = registry.unmount(&name, &id).await;
                match model.get_mut(&name) {
                    None => prop_assert!(matches!(r, Err(Error::NoSuchVolume(_))), "{r:?}"),
                    Some(m) => match m.get_mut(&id) {
                        // Unknown ID: success, no change, no save needed.
                        None => prop_assert!(r.is_ok(), "{r:?}"),
                        Some(n) => {
                            prop_assert_eq!(r.is_ok(), !failing, "{:?}", r);
                            *n -= 1; // the decrement stands either way
                            if *n == 0 {
                                m.remove(&id);
                            }
                        }
                    },
                }
            }
        }
        // The invariants.
        let snap = registry.snapshot();
        let got: Model = snap
            .iter()
            .map(|(n, (_, c))| (n.clone(), c.clone()))
            .collect();
        prop_assert_eq!(&got, &model);
        let mounted = mounter.mounted.lock().unwrap().clone();
        for (name, (flag, counts)) in &snap {
            let path = dir.path().join(name);
            prop_assert_eq!(*flag, total(counts) > 0, "{} flag", name);
            prop_assert_eq!(
                mounted.contains(&path),
                total(counts) > 0,
                "{} mounted",
                name
            );
        }
        prop_assert!(
            mounted
                .iter()
                .all(|p| snap.contains_key(p.file_name().unwrap().to_str().unwrap()))
        );
        let violations = mounter.violations.lock().unwrap().clone();
        prop_assert!(violations.is_empty(), "{:?}", violations);
        // (Bound first: a guard in the `if let` would be held while the committer needs it.)
        let last_save = store.saved.lock().unwrap().clone();
        if !failing && let Some(bytes) = last_save {
            let loaded = berth_volume::state::parse(&bytes, dir.path()).unwrap();
            let saved: Model = loaded
                .volumes
                .iter()
                .map(|(n, v)| (n.clone(), v.mounts.clone()))
                .collect();
            // The last save is at least as new as the last successful operation; after a failure
            // stretch ends, the first save catches up.
            if saved != model {
                // Only possible if no save happened since the stretch of failures: force one.
                registry.committer().commit().await.unwrap();
                let last_save = store.saved.lock().unwrap().clone();
                let bytes = last_save.unwrap();
                let loaded = berth_volume::state::parse(&bytes, dir.path()).unwrap();
                let saved: Model = loaded
                    .volumes
                    .iter()
                    .map(|(n, v)| (n.clone(), v.mounts.clone()))
                    .collect();
                prop_assert_eq!(saved, model.clone());
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn registry_matches_the_model(ops in proptest::collection::vec(op(), 1..80)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(play(ops))?;
    }
}
