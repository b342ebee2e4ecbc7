//! Loading each generation of the ECS volume plugin's state file (fixtures written by hand from
//! the formats described in `shared/reference/docker-volume-plugin.md` and amazon-ecs-agent PR
//! 4425), and switching a running setup over: berth serves the volumes with the paths recorded
//! there, remounts the referenced ones, and rewrites the file in its own format at the first change.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use berth_volume::state::{Format, load, parse};
use common::{MountGuard, Plugin, is_mounted};

const ID1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const ID2: &str = "2222222222222222222222222222222222222222222222222222222222222222";
const ID3: &str = "3333333333333333333333333333333333333333333333333333333333333333";
const ID4: &str = "4444444444444444444444444444444444444444444444444444444444444444";
const ID5: &str = "5555555555555555555555555555555555555555555555555555555555555555";

fn fixture(name: &str, dir: &Path) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(path)
        .unwrap()
        .replace("@DIR@", dir.to_str().unwrap())
        .into_bytes()
}

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

#[test]
fn oldest_generation_without_mounts() {
    let l = parse(
        &fixture("ecs_v0_no_mounts.json", Path::new("/x")),
        Path::new("/root"),
    )
    .unwrap();
    assert_eq!(l.format, Format::EcsNoMounts);
    let v = &l.volumes["ecs-web-1-efs-a1b2c3"];
    assert_eq!(v.path, PathBuf::from("/x/ecs/volumes/ecs-web-1-efs-a1b2c3"));
    assert!(v.mounts.is_empty());
    assert_eq!(v.created_at, "2021-03-04T05:06:07Z");
    assert_eq!(v.options["o"], "tls,iam");
    // The top-level type fills in options without one.
    assert_eq!(l.volumes["ecs-web-1-scratch"].options["type"], "efs");
}

#[test]
fn set_generation_counts_each_null_as_one() {
    let l = parse(
        &fixture("ecs_v1_mount_set.json", Path::new("/x")),
        Path::new("/root"),
    )
    .unwrap();
    assert_eq!(l.format, Format::EcsSet);
    assert_eq!(
        l.volumes["ecs-web-2-efs-d4e5f6"].mounts,
        counts(&[(ID1, 1), (ID2, 1)])
    );
    assert!(l.volumes["ecs-web-2-idle"].mounts.is_empty());
}

#[test]
fn count_generation_keeps_counts_and_reads_zero_as_one() {
    let l = parse(
        &fixture("ecs_v2_mount_counts.json", Path::new("/x")),
        Path::new("/root"),
    )
    .unwrap();
    assert_eq!(l.format, Format::EcsCounts);
    assert_eq!(
        l.volumes["ecs-web-3-efs-0a0b0c"].mounts,
        counts(&[(ID3, 2), (ID4, 1), (ID5, 1)])
    );
}

#[test]
fn berth_format_round_trips_and_unknown_versions_are_refused() {
    let l = parse(
        &fixture("ecs_v2_mount_counts.json", Path::new("/x")),
        Path::new("/root"),
    )
    .unwrap();
    let bytes = berth_volume::state::to_bytes(&l.volumes).unwrap();
    let again = parse(&bytes, Path::new("/root")).unwrap();
    assert_eq!(again.format, Format::Berth);
    assert_eq!(again.volumes, l.volumes);
    let e = parse(br#"{"version": 2, "volumes": {}}"#, Path::new("/r")).unwrap_err();
    assert!(e.contains("version 2 is not supported"), "{e}");
    assert!(
        parse(b"{trunc", Path::new("/r"))
            .unwrap_err()
            .contains("not valid JSON")
    );
    let missing = load(Path::new("/nonexistent/berth/state.json"), Path::new("/r")).unwrap();
    assert_eq!(missing.format, Format::Missing);
}

#[tokio::test]
async fn switching_over_from_the_ecs_plugin() {
    let guard = MountGuard::new();
    let log = guard.path().join("helper.log");
    let helper = common::recording_helper(guard.path(), &log);
    let mut config = Plugin::config(guard.path());
    config.mount_helper = helper.into_os_string();
    std::fs::create_dir_all(config.state_file.parent().unwrap()).unwrap();
    std::fs::write(
        &config.state_file,
        fixture("ecs_v1_mount_set.json", guard.path()),
    )
    .unwrap();
    let ecs_path = guard.path().join("ecs/volumes/ecs-web-2-efs-d4e5f6");

    let plugin = Plugin::start(config.clone()).await;
    // The referenced volume is mounted again (through the helper, at its ECS path).
    assert_eq!(
        plugin.recovery.remounted,
        vec!["ecs-web-2-efs-d4e5f6".to_owned()]
    );
    assert!(is_mounted(&ecs_path));
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(
        log_text.contains("fs-12345678:/data") && log_text.contains(ecs_path.to_str().unwrap())
    );

    let mut c = plugin.client().await;
    assert_eq!(c.list().await.unwrap().len(), 2);
    assert_eq!(
        c.path("ecs-web-2-efs-d4e5f6").await.unwrap(),
        ecs_path.to_str().unwrap()
    );
    c.unmount("ecs-web-2-efs-d4e5f6", ID1).await.unwrap();
    assert!(is_mounted(&ecs_path));
    // The first change rewrote the file in berth's format, paths kept.
    let saved = load(&config.state_file, &config.mount_root).unwrap();
    assert_eq!(saved.format, Format::Berth);
    assert_eq!(saved.volumes["ecs-web-2-efs-d4e5f6"].path, ecs_path);
    assert_eq!(
        saved.volumes["ecs-web-2-efs-d4e5f6"].mounts,
        counts(&[(ID2, 1)])
    );
    c.unmount("ecs-web-2-efs-d4e5f6", ID2).await.unwrap();
    assert!(!is_mounted(&ecs_path));
    // Remove deletes the ECS mount point directory (outside --mount-root), rmdir only.
    c.remove("ecs-web-2-efs-d4e5f6").await.unwrap();
    assert!(!ecs_path.exists());
    assert!(guard.path().join("ecs/volumes").is_dir());
    plugin.stop().await;
}
