//! A container's `resourceRequirements`: `{type, value}` entries, checked against ECS's rules.
//!
//! Invariants: at most one `GPU` entry per container, and its value is a whole number of GPUs of
//! at least 1 or `ALL`; that is the one entry berth acts on. `InferenceAccelerator` (Elastic
//! Inference) and `NeuronDevice` (ECS Managed Instances) only mean something on AWS: they are
//! checked for shape and accepted with a warning that says berth runs the container without
//! them. Limits: an `InferenceAccelerator` value is not matched against the task's
//! `inferenceAccelerators` device names (berth ignores those too); `sharingStrategy` is refused.

use super::checker::{Checker, key_path};
use super::json::{Json, describe, has_field, quote};
use super::rules::{MISSING, RESOURCE_REQUIREMENT, RESOURCE_TYPES};
use crate::types::GpuRequest;

const GPU_VALUE: &str = "a whole number of GPUs (\"1\", \"2\", ...) or \"ALL\"";

impl Checker {
    /// The container's GPU request, when it has a valid `GPU` entry.
    pub(super) fn resource_requirements(&mut self, path: &str, v: &Json) -> Option<GpuRequest> {
        let mut gpu = None;
        let mut first_gpu: Option<String> = None;
        for (item, p) in self.array(path, v).unwrap_or_default() {
            let Some(object) = self.object(&p, item) else {
                continue;
            };
            let (mut typ, mut value) = (None, None);
            for f in self.fields(&p, object, &RESOURCE_REQUIREMENT) {
                match f.key {
                    "type" => typ = self.string(&f.path, f.value).map(str::to_owned),
                    "value" => value = Some((f.path, f.value)),
                    _ => {} // `fields` only returns keys listed in RESOURCE_REQUIREMENT.known.
                }
            }
            if !has_field(object, "type") {
                self.error(
                    key_path(&p, "type"),
                    format!("{MISSING}; use {}", RESOURCE_TYPES.join(", ")),
                );
            }
            let Some(typ) = typ else { continue };
            let value_path = key_path(&p, "value");
            // ECS takes `value` or `sharingStrategy`; the latter is already refused above.
            if value.is_none() && !has_field(object, "sharingStrategy") {
                let hint = match typ.as_str() {
                    "GPU" => format!("; use {GPU_VALUE}"),
                    "InferenceAccelerator" => {
                        "; use the deviceName of one of the task's inferenceAccelerators".to_owned()
                    }
                    "NeuronDevice" => "; use \"ALL\"".to_owned(),
                    _ => String::new(),
                };
                self.error(value_path.as_str(), format!("{MISSING}{hint}"));
            }
            match typ.as_str() {
                "GPU" => {
                    let Some((vp, v)) = value else { continue };
                    let Some(request) = self.gpu_value(&vp, v) else {
                        continue;
                    };
                    if let Some(first) = &first_gpu {
                        self.error(
                            p.as_str(),
                            format!(
                                "a second GPU requirement (the first is {first}); keep one entry with the total number of GPUs"
                            ),
                        );
                    } else {
                        first_gpu = Some(p.clone());
                        gpu = Some(request);
                    }
                }
                "InferenceAccelerator" => {
                    if let Some((vp, v)) = value
                        && self.non_empty_string(&vp, v).is_some()
                    {
                        self.warn(
                            p.as_str(),
                            "Elastic Inference accelerators exist only on AWS: berth runs the container without this one",
                        );
                    }
                }
                "NeuronDevice" => {
                    let Some((vp, v)) = value else { continue };
                    match self.string(&vp, v) {
                        Some("ALL") => self.warn(
                            p.as_str(),
                            "Neuron devices are assigned only by ECS Managed Instances: berth runs the container without them (linuxParameters.devices can pass a /dev/neuron* device)",
                        ),
                        Some(other) => self.error(
                            vp.as_str(),
                            format!("must be \"ALL\" for NeuronDevice, found {}", quote(other)),
                        ),
                        None => {}
                    }
                }
                other => {
                    let path = key_path(&p, "type");
                    match RESOURCE_TYPES
                        .iter()
                        .find(|t| t.eq_ignore_ascii_case(other))
                    {
                        Some(t) => self.error(
                            path,
                            format!(
                                "unknown resource type {}; ECS spells it {}",
                                quote(other),
                                quote(t)
                            ),
                        ),
                        None => self.error(
                            path,
                            format!(
                                "unknown resource type {}; use {}",
                                quote(other),
                                RESOURCE_TYPES.join(", ")
                            ),
                        ),
                    }
                }
            }
        }
        gpu
    }

    /// A GPU requirement's value: a string holding a whole number of at least 1, or `ALL`.
    fn gpu_value(&mut self, path: &str, v: &Json) -> Option<GpuRequest> {
        let s = match v {
            Json::String(s) => s.as_str(),
            Json::Number(n) => {
                self.error(
                    path,
                    format!(
                        "expected a string, found {}; ECS takes the number of GPUs as a string: \"{n}\"",
                        describe(v)
                    ),
                );
                return None;
            }
            other => {
                self.type_error(path, &format!("a string holding {GPU_VALUE}"), other);
                return None;
            }
        };
        if s == "ALL" {
            return Some(GpuRequest::All);
        }
        if s.eq_ignore_ascii_case("all") {
            self.error(
                path,
                format!(
                    "must be {GPU_VALUE}, found {}; ECS spells it \"ALL\"",
                    quote(s)
                ),
            );
            return None;
        }
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            self.error(path, format!("must be {GPU_VALUE}, found {}", quote(s)));
            return None;
        }
        match s.parse::<u32>() {
            Ok(0) => {
                self.error(
                    path,
                    "must be at least 1 GPU, found \"0\"; remove the entry to run without GPUs",
                );
                None
            }
            Ok(n) => Some(GpuRequest::Count(n)),
            Err(_) => {
                self.error(
                    path,
                    format!("must be at most {} GPUs, found {}", u32::MAX, quote(s)),
                );
                None
            }
        }
    }
}
