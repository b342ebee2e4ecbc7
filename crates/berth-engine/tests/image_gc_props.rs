//! Properties of image cleanup's decision (`berth_engine::image_gc::plan`) over random images,
//! tracked records, containers, tasks, settings and clocks: every image removed meets every rule;
//! the order is tracked least recently used first, then untracked smallest first; a cycle removes
//! min(N, candidates); disk pressure removes the shortest LRU prefix that frees the bytes asked
//! for; a prune removes every candidate; every image has exactly one decision.

use berth_engine::image_gc::{Decision, Keep, Mode, Settings, plan};
use berth_engine::image_use::TrackedImage;
use berth_engine::runtime::{ContainerSummary, ImageSummary};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
struct World {
    images: Vec<ImageSummary>,
    tracked: Vec<TrackedImage>,
    containers: Vec<ContainerSummary>,
    tasks: Vec<(String, String)>,
    settings: Settings,
    now: i64,
}

/// Image i is named `img<i>:1`; each flag decides one rule for it.
fn world() -> impl Strategy<Value = World> {
    let image = (
        1u64..1000,    // size
        0i64..1000,    // created
        any::<bool>(), // tracked
        0i64..1000,    // last used
        any::<bool>(), // a container uses it
        any::<bool>(), // a task names it
        0u8..10,       // excluded when 0
    );
    (
        prop::collection::vec(image, 0..12),
        0i64..600,
        1usize..6,
        any::<bool>(),
        500i64..1500,
    )
        .prop_map(|(specs, age, per_cycle, untracked, now)| {
            let mut w = World {
                images: Vec::new(),
                tracked: Vec::new(),
                containers: Vec::new(),
                tasks: Vec::new(),
                settings: Settings {
                    minimum_age_ms: age,
                    untracked_minimum_age_ms: age,
                    per_cycle,
                    exclude: Vec::new(),
                    untracked,
                },
                now,
            };
            for (i, (size, created, tracked, used, in_use, named, excluded)) in
                specs.into_iter().enumerate()
            {
                let name = format!("img{i}:1");
                w.images.push(ImageSummary {
                    id: format!("sha256:{i:04}"),
                    repo_tags: vec![name.clone()],
                    size,
                    created,
                    labels: BTreeMap::new(),
                });
                if tracked {
                    w.tracked.push(TrackedImage {
                        reference: name.clone(),
                        last_used: used,
                        ..TrackedImage::default()
                    });
                }
                if in_use {
                    w.containers.push(ContainerSummary {
                        id: format!("c{i}"),
                        name: format!("c{i}"),
                        image: name.clone(),
                        image_id: format!("sha256:{i:04}"),
                        running: i % 2 == 0,
                        labels: BTreeMap::new(),
                    });
                }
                if named {
                    w.tasks.push((format!("t{i}"), name.clone()));
                }
                if excluded == 0 {
                    w.settings.exclude.push(name);
                }
            }
            w
        })
}

/// Whether image `i` meets every rule, and its sort key: (untracked?, last used or size).
fn eligible(w: &World, i: usize) -> Option<(bool, i64)> {
    let img = &w.images[i];
    let name = &img.repo_tags[0];
    let tracked = w.tracked.iter().find(|t| &t.reference == name);
    if w.settings.exclude.contains(name)
        || (tracked.is_none() && !w.settings.untracked)
        || w.containers.iter().any(|c| c.image_id == img.id)
        || w.tasks.iter().any(|(_, n)| n == name)
    {
        return None;
    }
    let since = tracked.map_or(img.created, |t| t.last_used);
    if w.now < since + w.settings.minimum_age_ms {
        return None;
    }
    Some(match tracked {
        Some(t) => (false, t.last_used),
        None => (true, i64::try_from(img.size).unwrap_or(i64::MAX)),
    })
}

fn index(w: &World, id: &str) -> usize {
    w.images.iter().position(|i| i.id == id).expect("known id")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn removals_meet_every_rule_in_order_and_in_number(w in world(), free in 0u64..3000) {
        let candidates: Vec<usize> = (0..w.images.len()).filter(|&i| eligible(&w, i).is_some()).collect();
        for mode in [Mode::Cycle, Mode::Prune, Mode::Pressure { bytes_to_free: free }] {
            let p = plan(&w.tracked, &w.images, &w.containers, &w.tasks, &w.settings, mode, w.now);
            prop_assert_eq!(p.verdicts.len(), w.images.len(), "one verdict per image");
            let removed: Vec<usize> = p.removals().map(|v| index(&w, &v.image_id)).collect();
            for &i in &removed {
                prop_assert!(eligible(&w, i).is_some(), "{} removed against a rule", i);
            }
            // Order: tracked LRU, then untracked smallest first.
            let keys: Vec<(bool, i64)> = removed.iter().map(|&i| eligible(&w, i).expect("eligible")).collect();
            prop_assert!(keys.windows(2).all(|k| k[0] <= k[1]), "order {:?}", keys);
            // Orders are 0, 1, 2, … in the listing.
            for (n, v) in p.removals().enumerate() {
                prop_assert_eq!(&v.decision, &Decision::Remove { order: n });
            }
            match mode {
                Mode::Cycle => prop_assert_eq!(removed.len(), candidates.len().min(w.settings.per_cycle)),
                Mode::Prune => prop_assert_eq!(removed.len(), candidates.len()),
                Mode::Pressure { bytes_to_free } => {
                    let sizes: Vec<u64> = removed.iter().map(|&i| w.images[i].size).collect();
                    let total: u64 = sizes.iter().sum();
                    prop_assert!(total >= bytes_to_free || removed.len() == candidates.len());
                    if let Some(last) = sizes.last() {
                        prop_assert!(total - last < bytes_to_free, "no more than needed");
                    }
                }
            }
            // A candidate that stays says why: over the limit, or not needed.
            for v in &p.verdicts {
                let i = index(&w, &v.image_id);
                if let Decision::Keep(k) = &v.decision {
                    let over = matches!(k, Keep::CycleLimit { .. } | Keep::EnoughFreed);
                    prop_assert_eq!(over, eligible(&w, i).is_some(), "{} kept as {:?}", i, k);
                }
            }
        }
    }
}
