//! The tag options: `--tag KEY=VALUE` (`berth run`, `berth submit`: the task's tags, as ECS's
//! `RunTask` takes them, laid over the definition's `tags`) and the agent's container instance
//! tags (`--container-instance-tag KEY=VALUE`, the config key `container-instance-tags`, ECS's
//! `ECS_CONTAINER_INSTANCE_TAGS` JSON object), every tag checked by ECS's rules
//! (`berth_model::tags`), each problem naming its option.

use anyhow::anyhow;
use berth_model::tags::{self, Tag};

/// clap's parser for one `KEY=VALUE`.
fn parse_tag(text: &str) -> Result<Tag, tags::TagError> {
    tags::parse_key_value(text)
}

/// The task's tags given with the task.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TaskTagArgs {
    /// A tag of this task (repeatable), shown in the metadata's `TaskTags` (taskWithTags) as ECS's
    /// RunTask `tags`; it wins over a tag of the same key in the definition's `tags`.
    #[arg(long = "tag", value_name = "KEY=VALUE", value_parser = parse_tag)]
    pub tags: Vec<Tag>,
}

impl TaskTagArgs {
    /// `definition` with these tags laid over its own (or why the result has too many).
    pub fn apply(&self, definition: &mut berth_model::TaskDefinition) -> anyhow::Result<()> {
        let merged = tags::merge(&definition.tags, &self.tags);
        tags::check_count(merged.len()).map_err(|why| anyhow!("--tag: {why}"))?;
        definition.tags = merged;
        Ok(())
    }
}

/// The environment variable ECS reads its container instance tags from.
pub const ECS_INSTANCE_TAGS_ENV: &str = "ECS_CONTAINER_INSTANCE_TAGS";

/// The container instance's tags (`ContainerInstanceTags` of the metadata's taskWithTags).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct InstanceTagArgs {
    /// A tag of this container instance (repeatable), shown as `ContainerInstanceTags` in the
    /// metadata's taskWithTags answers. Without any: ECS's ECS_CONTAINER_INSTANCE_TAGS, a JSON
    /// object such as {"rack":"r1"}.
    #[arg(
        long = "container-instance-tag",
        value_name = "KEY=VALUE",
        value_parser = parse_tag,
        add = crate::config::Key::new()
            .named("container-instance-tags")
            .env(&[ECS_INSTANCE_TAGS_ENV])
            .shown(|r| r.args::<InstanceTagArgs>()?.shown())
    )]
    pub container_instance_tags: Vec<Tag>,
}

impl InstanceTagArgs {
    /// The tags: the options (the config file's included), else the environment variable.
    pub fn resolve(&self) -> anyhow::Result<Vec<Tag>> {
        self.resolve_with(std::env::var(ECS_INSTANCE_TAGS_ENV).ok().as_deref())
    }

    fn resolve_with(&self, env: Option<&str>) -> anyhow::Result<Vec<Tag>> {
        let list = if self.container_instance_tags.is_empty() {
            match env.map(str::trim).filter(|v| !v.is_empty()) {
                Some(text) => from_json(text)
                    .map_err(|why| anyhow!("{ECS_INSTANCE_TAGS_ENV}={text}: {why}"))?,
                None => Vec::new(),
            }
        } else {
            // Repeats of a key: the later one wins, as in ECS's JSON object.
            tags::merge(&[], &self.container_instance_tags)
        };
        tags::check_count(list.len()).map_err(|why| anyhow!("--container-instance-tag: {why}"))?;
        Ok(list)
    }

    /// The tags as the configuration file's table (`--print-config`), None when there are none.
    fn shown(&self) -> anyhow::Result<Option<toml::Value>> {
        let list = self.resolve()?;
        Ok((!list.is_empty()).then(|| {
            let table: toml::Table = list
                .into_iter()
                .map(|tag| (tag.key, toml::Value::String(tag.value)))
                .collect();
            table.into()
        }))
    }
}

/// ECS's format: a JSON object of strings, each key and value checked.
fn from_json(text: &str) -> Result<Vec<Tag>, String> {
    let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(text)
        .map_err(|e| format!("expected a JSON object such as {{\"rack\":\"r1\"}} ({e})"))?;
    let mut out = Vec::new();
    for (key, value) in map {
        let serde_json::Value::String(value) = value else {
            return Err(format!(
                "the value of {key:?} must be a string, found {value}"
            ));
        };
        tags::check_key(&key).map_err(|e| e.to_string())?;
        tags::check_value(&value).map_err(|e| e.to_string())?;
        out.push(Tag::new(key, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        task: TaskTagArgs,
        #[command(flatten)]
        instance: InstanceTagArgs,
    }

    #[test]
    fn flags_win_over_the_environment_and_bad_tags_name_their_option() {
        let cli = Cli::try_parse_from([
            "x",
            "--container-instance-tag",
            "rack=r1",
            "--container-instance-tag",
            "rack=r2",
            "--tag",
            "team=web",
        ])
        .expect("parses");
        assert_eq!(
            cli.instance
                .resolve_with(Some(r#"{"env":"ignored"}"#))
                .expect("ok"),
            vec![Tag::new("rack", "r2")]
        );
        let none = Cli::try_parse_from(["x"]).expect("parses");
        assert_eq!(
            none.instance
                .resolve_with(Some(r#"{"zone":"a","os":"linux"}"#))
                .expect("ok"),
            vec![Tag::new("os", "linux"), Tag::new("zone", "a")]
        );
        let bad = none
            .instance
            .resolve_with(Some(r#"{"aws:x":"1"}"#))
            .expect_err("reserved");
        assert!(bad.to_string().contains(ECS_INSTANCE_TAGS_ENV), "{bad}");
        let bad = none
            .instance
            .resolve_with(Some("rack=r1"))
            .expect_err("not json");
        assert!(bad.to_string().contains("JSON object"), "{bad}");
        let err = Cli::try_parse_from(["x", "--tag", "novalue"])
            .err()
            .expect("refused");
        assert!(err.to_string().contains("--tag"), "{err}");

        let mut def = berth_model::TaskDefinition::new("f", Vec::new());
        def.tags = vec![Tag::new("team", "db"), Tag::new("env", "prod")];
        cli.task.apply(&mut def).expect("applies");
        assert_eq!(
            def.tags,
            vec![Tag::new("team", "web"), Tag::new("env", "prod")]
        );
    }
}
