//! The runtime contract (`berth_testkit::contract`) on the fake runtime: no Docker needed.

use std::collections::BTreeMap;

use berth_engine::fake::{FakeRuntime, Script};
use berth_testkit::contract::{Behaviour, Subject};

/// A fresh fake runtime with the test image present and one pullable image.
struct Fake {
    rt: FakeRuntime,
}

const IMAGE: &str = "berth-test/busybox:latest";
const PULLABLE: &str = "registry.invalid/berth-contract/pullable:latest";

fn fake() -> Fake {
    let rt = FakeRuntime::new();
    rt.add_image(IMAGE);
    rt.add_remote(PULLABLE);
    Fake { rt }
}

impl Subject for Fake {
    type Runtime = FakeRuntime;

    fn runtime(&self) -> &FakeRuntime {
        &self.rt
    }

    fn image(&self) -> String {
        IMAGE.to_owned()
    }

    fn prepare(&self, container: &str, behaviour: Behaviour) {
        let script = match behaviour {
            Behaviour::RunsUntilStopped => Script::default(),
            Behaviour::IgnoresSigterm => Script {
                ignores_sigterm: true,
                ..Script::default()
            },
            Behaviour::Exits(code) => Script {
                exit_code: Some(code),
                ..Script::default()
            },
            Behaviour::Healthy => Script {
                healthy: true,
                ..Script::default()
            },
            Behaviour::Unhealthy => Script {
                unhealthy: true,
                ..Script::default()
            },
            Behaviour::OutOfMemory => Script {
                exit_code: Some(137),
                oom_killed: true,
                ..Script::default()
            },
        };
        self.rt.script(container, script);
    }

    fn missing_image(&self) -> String {
        "registry.invalid/berth-contract/missing:latest".to_owned()
    }

    fn pullable_image(&self) -> String {
        PULLABLE.to_owned()
    }

    fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    fn importable_image(&self) -> String {
        berth_testkit::unique_name("berth-contract-import-") + ":1"
    }
}

berth_testkit::runtime_contract!(fake());
