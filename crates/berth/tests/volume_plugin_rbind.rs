//! `berth volume-plugin` (the built binary) with a `type=bind,o=rbind` volume over a directory
//! that has a submount, driven by the Rust client, in a private mount namespace (root): the last
//! Unmount and `release` take the bind's copies of the submounts down deepest first and leave the
//! source's own submount mounted (even when the source tree is shared, as a systemd host's `/`
//! is); a reference still held keeps everything mounted; Remove then succeeds.

use berth_testkit::mount::{Scratch, is_mounted, make_rshared, mounts_under, tmpfs};
use berth_testkit::ns_test;
use berth_testkit::volume_plugin::PluginProcess;
use berth_volume::client::Client;
use std::path::{Path, PathBuf};

/// `src` (a tmpfs, shared) with `src/sub` (another tmpfs, holding `f`) mounted below it.
fn source_with_submount(scratch: &Scratch) -> PathBuf {
    let src = scratch.join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    tmpfs("berth-rbind-src", &src, c"size=1m");
    std::fs::create_dir(src.join("sub")).expect("mkdir sub");
    tmpfs("berth-rbind-sub", &src.join("sub"), c"size=1m");
    std::fs::write(src.join("sub/f"), b"kept").expect("write");
    // Shared, so a bind of it joins its peer groups and an unmount could propagate back.
    make_rshared(&src);
    src
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn mounts_in(dir: &Path) -> Vec<PathBuf> {
    mounts_under(dir)
}

ns_test! {
    fn an_rbind_volume_over_a_submount_unmounts_cleanly_and_keeps_the_sources_mounts() {
        let scratch = Scratch::with_prefix("berth-rbind-test-");
        let src = source_with_submount(&scratch);
        let plugin_dir = scratch.join("plugin");
        std::fs::create_dir_all(&plugin_dir).expect("mkdir");
        let socket = plugin_dir.join("p.sock");
        let plugin = PluginProcess::spawn(env!("CARGO_BIN_EXE_berth"), &socket, &plugin_dir, None);
        let volumes = plugin_dir.join("volumes");
        runtime().block_on(async {
            let mut c = Client::connect(&socket).await.expect("connect");
            let device = src.display().to_string();
            c.create("rb", &[("type", "bind"), ("device", &device), ("o", "rbind")])
                .await
                .expect("create");
            let path = PathBuf::from(c.mount("rb", "a").await.expect("mount a"));
            assert_eq!(std::fs::read(path.join("sub/f")).expect("the submount is visible"), b"kept");
            c.mount("rb", "b").await.expect("mount b");
            // b still holds it: nothing is unmounted under a positive count.
            c.unmount("rb", "a").await.expect("unmount a");
            assert!(is_mounted(&path) && is_mounted(&path.join("sub")), "{:?}", mounts_in(&volumes));
            // The last reference: the copy of sub, then the bind itself.
            c.unmount("rb", "b").await.expect("the last unmount succeeds");
            assert!(mounts_in(&volumes).is_empty(), "left: {:?}", mounts_in(&volumes));
            assert!(is_mounted(&src.join("sub")), "the source's own submount is still mounted");
            assert_eq!(std::fs::read(src.join("sub/f")).expect("source intact"), b"kept");
            // Mounted again, then released by the operator's command: the same.
            c.mount("rb", "c").await.expect("mount c");
            assert!(is_mounted(&path.join("sub")));
            let sock = socket.display().to_string();
            let (ok, out) = plugin.berth(&["release", "--socket", &sock, "rb", "c"]);
            assert!(ok, "{out}");
            assert!(mounts_in(&volumes).is_empty(), "left: {:?}", mounts_in(&volumes));
            assert!(is_mounted(&src.join("sub")), "the source's own submount is still mounted");
            c.remove("rb").await.expect("remove");
        });
    }
}
