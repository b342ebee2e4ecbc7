//! Provisioning berth's own pause image ([`crate::pause_image`]) in the container engine: the one
//! call, [`ensure_pause_image`], that imports it through [`Runtime::import_image`] unless the
//! engine has it already. The actor's pull effect of the pause container calls it (when the
//! operator gives no `--pause-image`). Kept apart from the pure
//! image module so that the create spec, which names the image, never reaches runtime code.

use crate::pause_image;
use crate::runtime::{Runtime, RuntimeError};

/// Makes sure the engine has the built-in pause image, importing it when it is absent; returns
/// its name. Imports from this process are serialized (the check and the import under one lock),
/// so tasks starting together import it once and leave no untagged copy. Two berth processes may
/// still both import it: harmless (each import makes an image of the same files; the last one
/// gets the name, the other is left untagged, a few hundred bytes that `docker image prune`
/// removes, and a container made from it in between keeps running).
pub async fn ensure_pause_image<R: Runtime>(rt: &R) -> Result<String, RuntimeError> {
    static IMPORTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let image = pause_image::image_name();
    if rt.image_present(&image).await? {
        return Ok(image);
    }
    let _one_at_a_time = IMPORTING.lock().await;
    if rt.image_present(&image).await? {
        return Ok(image);
    }
    let rootfs = pause_image::rootfs_tar().map_err(|e| RuntimeError::Other(e.to_string()))?;
    tracing::info!(%image, "importing berth's pause image");
    rt.import_image(&image, rootfs, pause_image::import_changes())
        .await?;
    Ok(image)
}
