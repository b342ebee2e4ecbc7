//! The runtime contract (`berth_testkit::contract`) on the Docker Engine through
//! `berth_docker::DockerRuntime`. Run it through `scripts/test` (the Engine, the offline test image
//! and the throwaway registry): `scripts/test -p berth-testkit --test contract_docker`.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Mutex;

use berth_docker::DockerRuntime;
use berth_testkit::contract::{Behaviour, Subject};
use berth_testkit::{
    TEST_LABEL, docker_cli as cli, registry, require_image, test_image, unique_name,
};

/// Label with this subject's own value on everything its scenario creates.
const CONTRACT_LABEL: &str = "berth.contract";

/// The Docker runtime, and what one scenario created there: removed when dropped, even when the
/// scenario panics (volumes only then: a scenario that passes has removed its own).
struct Docker {
    rt: DockerRuntime,
    run: String,
    /// Images under names of this subject's own: pushed and pulled, or imported.
    images: Mutex<Vec<String>>,
}

async fn docker() -> Docker {
    let client = berth_testkit::docker().await;
    require_image(&client, &test_image()).await;
    Docker {
        rt: DockerRuntime::new(client),
        run: unique_name("run-"),
        images: Mutex::new(Vec::new()),
    }
}

impl Subject for Docker {
    type Runtime = DockerRuntime;

    fn runtime(&self) -> &DockerRuntime {
        &self.rt
    }

    fn image(&self) -> String {
        test_image()
    }

    /// The Engine runs [`Behaviour::command`] and the health check in the spec: nothing to do.
    fn prepare(&self, _container: &str, _behaviour: Behaviour) {}

    fn missing_image(&self) -> String {
        format!(
            "{}/{}:latest",
            registry(),
            unique_name("berth-contract-missing-")
        )
    }

    /// The test image pushed to the throwaway registry under a new name, then untagged locally.
    fn pullable_image(&self) -> String {
        let image = format!("{}/{}:latest", registry(), unique_name("berth-contract-"));
        self.remember(&image);
        cli(&["tag", &test_image(), &image]);
        cli(&["push", "--quiet", &image]);
        cli(&["rmi", &image]);
        image
    }

    fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (TEST_LABEL.to_owned(), "1".to_owned()),
            (CONTRACT_LABEL.to_owned(), self.run.clone()),
        ])
    }

    /// A repository of this run's own (never berth's real `berth/pause`), removed when dropped
    /// with every image that carries this run's label.
    fn importable_image(&self) -> String {
        let image = format!("{}:1", unique_name("berth-contract-import-"));
        self.remember(&image);
        image
    }
}

impl Docker {
    /// Remove `image` when dropped.
    fn remember(&self, image: &str) {
        self.images
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(image.to_owned());
    }
}

impl Drop for Docker {
    fn drop(&mut self) {
        let filter = format!("label={CONTRACT_LABEL}={}", self.run);
        let run = |args: &[&str]| {
            Command::new("docker")
                .args(args)
                .output()
                .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
                .unwrap_or_default()
        };
        for id in run(&["ps", "-aq", "--filter", &filter]).lines() {
            run(&["rm", "-f", "-v", id]);
        }
        // Scenarios that pass remove their volumes themselves. Listing volumes asks every volume
        // plugin dockerd remembers, seconds each for one that is gone (berth's plugin suites
        // use Engines of their own, but the machine's may remember another's), so look only
        // after a failure.
        if std::thread::panicking() {
            for name in run(&["volume", "ls", "-q", "--filter", &filter]).lines() {
                run(&["volume", "rm", "-f", name]);
            }
        }
        let images = std::mem::take(
            self.images
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for image in images {
            run(&["rmi", "-f", &image]);
        }
        // Imports carry the labels too; a second import under one name leaves the first image
        // untagged, found only by its label.
        for id in run(&["images", "-aq", "--filter", &filter]).lines() {
            run(&["rmi", "-f", id]);
        }
    }
}

berth_testkit::runtime_contract!(docker().await);
