//! `ensure_pause_image` on the fake runtime: the built-in pause image is imported once, when the
//! engine does not have it, and never when it does.

use berth_engine::Runtime;
use berth_engine::fake::FakeRuntime;
use berth_engine::pause_image::{PAUSE_REPOSITORY, image_name};
use berth_engine::pause_provision::ensure_pause_image;

#[tokio::test]
async fn the_pause_image_is_imported_on_first_use_only() {
    let rt = FakeRuntime::new();
    assert!(!rt.image_present(&image_name()).await.expect("present?"));

    let name = ensure_pause_image(&rt).await.expect("imported");
    assert_eq!(name, image_name());
    assert!(name.starts_with(&format!("{PAUSE_REPOSITORY}:")));
    assert!(rt.image_present(&name).await.expect("present?"));
    assert_eq!(rt.imports(), 1);
    assert_eq!(rt.calls(), vec![format!("import {name}")]);

    // Present now: a second call only looks.
    assert_eq!(ensure_pause_image(&rt).await.expect("present"), name);
    assert_eq!(rt.imports(), 1, "no second import");
}

#[tokio::test]
async fn an_image_already_present_is_not_imported() {
    let rt = FakeRuntime::new();
    rt.add_image(&image_name());
    assert_eq!(
        ensure_pause_image(&rt).await.expect("present"),
        image_name()
    );
    assert_eq!(rt.imports(), 0);
}
