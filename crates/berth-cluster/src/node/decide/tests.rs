//! Tests of the node's decisions ([`on_assignment`], [`on_delete`], [`resync`]):
//!
//! - a table over every case of the rule in the module's header;
//! - property tests: a random memory and assignment list (`a_resync_accepts_each_new_task_once_and_releases_the_rest`:
//!   each present assignment accepted exactly once, released = accepted − present, fences never
//!   overwritten, a second resync accepts nothing), and a model (`the_node_converges_on_etcd`):
//!   assignments placed, stopped, deleted and written again with another fence in random order,
//!   each change seen by the watch or missed (a compaction, a node down), resyncs in between:
//!   no task is accepted twice, an accepted fence never changes, and after a last resync the node
//!   holds exactly etcd's assignments and has asked every STOPPED one to stop.

use super::*;
use proptest::prelude::{ProptestConfig, any, prop, prop_assert, prop_assert_eq, proptest};
use proptest::strategy::Strategy as _;
use proptest::test_runner::TestCaseError;
use std::collections::BTreeMap;

fn assignment(task: &str, fence: i64, stop: Option<Option<&str>>) -> Assignment {
    Assignment {
        task: task.to_owned(),
        fence,
        desired_status: if stop.is_some() {
            DesiredStatus::Stopped
        } else {
            DesiredStatus::Running
        },
        reason: stop.flatten().map(str::to_owned),
    }
}

fn memory(accepted: &[(&str, i64)]) -> Memory {
    Memory {
        lease: Some(1),
        revision: 10,
        accepted: accepted
            .iter()
            .map(|(t, f)| ((*t).to_owned(), *f))
            .collect(),
    }
}

#[test]
fn one_assignment_rule_by_rule() {
    let m = memory(&[("a", 5)]);
    let cases = [
        // Not accepted: accept, asked to stop when it says STOPPED (its reason, or the default).
        (assignment("b", 7, None), Step::Accept { stop: None }),
        (
            assignment("b", 7, Some(Some("Task stopped by user"))),
            Step::Accept {
                stop: Some("Task stopped by user".into()),
            },
        ),
        (
            assignment("b", 7, Some(None)),
            Step::Accept {
                stop: Some(STOPPED_REASON.into()),
            },
        ),
        // Accepted with its fence: nothing, or a stop.
        (assignment("a", 5, None), Step::Keep),
        (
            assignment("a", 5, Some(Some("Scaling activity"))),
            Step::Stop {
                reason: "Scaling activity".into(),
            },
        ),
        (
            assignment("a", 5, Some(None)),
            Step::Stop {
                reason: STOPPED_REASON.into(),
            },
        ),
        // Another fence: ignored, running or not.
        (assignment("a", 6, None), Step::OtherFence { accepted: 5 }),
        (
            assignment("a", 4, Some(Some("x"))),
            Step::OtherFence { accepted: 5 },
        ),
    ];
    for (a, wanted) in cases {
        assert_eq!(on_assignment(&m, &a), wanted, "{a:?}");
    }
    assert!(on_delete(&m, "a"));
    assert!(!on_delete(&m, "b"));
}

#[test]
fn a_resync_sorts_the_whole_list() {
    let m = memory(&[
        ("kept", 1),
        ("stopping", 2),
        ("moved", 3),
        ("gone", 4),
        ("gone2", 9),
    ]);
    let list = [
        assignment("new", 10, None),
        assignment("kept", 1, None),
        assignment("stopping", 2, Some(Some("Task stopped by user"))),
        assignment("moved", 8, None),
        assignment("new-stopped", 11, Some(None)),
        // Listed twice: the first counts.
        assignment("new", 12, Some(None)),
    ];
    assert_eq!(
        resync(&m, &list),
        Diff {
            accept: vec![
                (assignment("new", 10, None), None),
                (
                    assignment("new-stopped", 11, Some(None)),
                    Some(STOPPED_REASON.into())
                ),
            ],
            stop: vec![("stopping".into(), "Task stopped by user".into())],
            release: vec!["gone".into(), "gone2".into()],
            ignored: vec![("moved".into(), 3, 8)],
        }
    );
    // Nothing accepted, nothing listed: nothing to do.
    assert_eq!(resync(&Memory::default(), &[]), Diff::default());
}

// ---------------------------------------------------------------------------------------------
// Properties

/// Task ids from a small pool, so lists and memories overlap.
fn id(i: u8) -> String {
    format!("t{}", i % 8)
}

fn assignment_strategy() -> impl proptest::strategy::Strategy<Value = Assignment> {
    (
        any::<u8>(),
        1..=3i64,
        any::<bool>(),
        prop::option::of("[a-z]{1,3}"),
    )
        .prop_map(|(i, fence, stopped, reason)| Assignment {
            task: id(i),
            fence,
            desired_status: if stopped {
                DesiredStatus::Stopped
            } else {
                DesiredStatus::Running
            },
            reason,
        })
}

fn memory_strategy() -> impl proptest::strategy::Strategy<Value = Memory> {
    prop::collection::btree_map(any::<u8>().prop_map(id), 1..=3i64, 0..8).prop_map(|accepted| {
        Memory {
            lease: None,
            revision: 1,
            accepted,
        }
    })
}

/// `memory` after the node performed `diff` (each acceptance succeeded).
fn performed(memory: &Memory, diff: &Diff) -> Memory {
    let mut m = memory.clone();
    for (a, _) in &diff.accept {
        m.accepted.insert(a.task.clone(), a.fence);
    }
    for t in &diff.release {
        m.accepted.remove(t);
    }
    m
}

/// One change of etcd's assignments in the model.
#[derive(Debug, Clone)]
enum Change {
    /// A task placed here (a fresh id: ids are never placed twice).
    Place,
    /// The assignment of the i-th present task says STOPPED.
    Stop(usize),
    /// The i-th present assignment deleted (the controller closed its task).
    Delete(usize),
    /// The i-th present assignment written again with another fence (another writer's).
    Refence(usize),
}

fn change_strategy() -> impl proptest::strategy::Strategy<Value = Change> {
    proptest::prop_oneof![
        3 => proptest::strategy::Just(Change::Place),
        2 => (0..16usize).prop_map(Change::Stop),
        2 => (0..16usize).prop_map(Change::Delete),
        1 => (0..16usize).prop_map(Change::Refence),
    ]
}

/// The node as the loop drives it: its memory, and what it did.
#[derive(Default)]
struct Node {
    memory: Memory,
    /// How many times each task was accepted.
    accepted: BTreeMap<String, usize>,
    /// Every fence each task was accepted with, in order (one, if fences never change).
    fences: BTreeMap<String, i64>,
    /// Tasks asked to stop (by a Stop step or an acceptance already stopped).
    stopped: BTreeSet<String>,
}

impl Node {
    fn accept(&mut self, a: &Assignment, stop: Option<String>) -> Result<(), String> {
        *self.accepted.entry(a.task.clone()).or_default() += 1;
        if let Some(&f) = self.fences.get(&a.task)
            && f != a.fence
        {
            return Err(format!(
                "{} accepted with fence {f}, then {}",
                a.task, a.fence
            ));
        }
        self.fences.insert(a.task.clone(), a.fence);
        self.memory.accepted.insert(a.task.clone(), a.fence);
        if stop.is_some() {
            self.stopped.insert(a.task.clone());
        }
        Ok(())
    }

    /// A watch event for a put of `a`.
    fn put(&mut self, a: &Assignment) -> Result<(), String> {
        match on_assignment(&self.memory, a) {
            Step::Accept { stop } => self.accept(a, stop)?,
            Step::Stop { .. } => {
                self.stopped.insert(a.task.clone());
            }
            Step::Keep | Step::OtherFence { .. } => {}
        }
        Ok(())
    }

    fn delete(&mut self, task: &str) {
        if on_delete(&self.memory, task) {
            self.memory.accepted.remove(task);
        }
    }

    fn resync(&mut self, etcd: &BTreeMap<String, Assignment>) -> Result<(), String> {
        let list: Vec<Assignment> = etcd.values().cloned().collect();
        let diff = resync(&self.memory, &list);
        for (a, stop) in &diff.accept {
            self.accept(a, stop.clone())?;
        }
        for (t, _) in &diff.stop {
            self.stopped.insert(t.clone());
        }
        for t in &diff.release {
            self.memory.accepted.remove(t);
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_resync_accepts_each_new_task_once_and_releases_the_rest(
        memory in memory_strategy(),
        list in prop::collection::vec(assignment_strategy(), 0..12),
    ) {
        let diff = resync(&memory, &list);
        // The first of each task's assignments is the one that counts.
        let mut first: BTreeMap<&str, &Assignment> = BTreeMap::new();
        for a in &list {
            first.entry(a.task.as_str()).or_insert(a);
        }
        let accepted: Vec<&str> = diff.accept.iter().map(|(a, _)| a.task.as_str()).collect();
        let unique: BTreeSet<&str> = accepted.iter().copied().collect();
        prop_assert_eq!(unique.len(), accepted.len(), "accepted twice: {:?}", accepted);
        for (task, a) in &first {
            let known = memory.accepted.get(*task);
            let stopped = a.desired_status == DesiredStatus::Stopped;
            let in_accept = diff.accept.iter().find(|(x, _)| x.task == *task);
            let in_stop = diff.stop.iter().any(|(t, _)| t == task);
            let in_ignored = diff.ignored.iter().find(|(t, _, _)| t == task);
            match known {
                None => {
                    let (x, stop) = in_accept.expect("a new task is accepted");
                    prop_assert_eq!(x, *a);
                    prop_assert_eq!(stop.is_some(), stopped);
                    prop_assert!(!in_stop && in_ignored.is_none());
                }
                Some(&f) if f == a.fence => {
                    prop_assert!(in_accept.is_none() && in_ignored.is_none());
                    prop_assert_eq!(in_stop, stopped);
                }
                Some(&f) => {
                    prop_assert!(in_accept.is_none() && !in_stop);
                    prop_assert_eq!(in_ignored, Some(&((*task).to_owned(), f, a.fence)));
                }
            }
        }
        let released: Vec<&String> = memory
            .accepted
            .keys()
            .filter(|t| !first.contains_key(t.as_str()))
            .collect();
        prop_assert_eq!(diff.release.iter().collect::<Vec<_>>(), released);

        // Performed, then resynced again: nothing more to accept or release; no fence the node
        // had was overwritten.
        let after = performed(&memory, &diff);
        for (t, f) in &memory.accepted {
            if first.contains_key(t.as_str()) {
                prop_assert_eq!(after.accepted.get(t), Some(f));
            }
        }
        prop_assert_eq!(
            after.accepted.keys().map(String::as_str).collect::<BTreeSet<_>>(),
            first.keys().copied().collect::<BTreeSet<_>>()
        );
        let again = resync(&after, &list);
        prop_assert!(again.accept.is_empty() && again.release.is_empty(), "{:?}", again);
        prop_assert_eq!(again.ignored, diff.ignored);
    }

    #[test]
    fn the_node_converges_on_etcd(
        script in prop::collection::vec(
            (change_strategy(), any::<bool>(), proptest::bool::weighted(0.15)),
            0..40,
        ),
    ) {
        let mut etcd: BTreeMap<String, Assignment> = BTreeMap::new();
        let mut node = Node::default();
        let mut next_id = 0u32;
        for (step, (change, seen, resync_after)) in script.iter().enumerate() {
            // Each change is etcd's next revision.
            let revision = i64::try_from(step).unwrap_or(i64::MAX) + 1;
            let present: Vec<String> = etcd.keys().cloned().collect();
            let pick = |i: usize| present.get(i % present.len().max(1)).cloned();
            // The change in etcd, and the watch event it makes.
            let event: Option<Result<Assignment, String>> = match change {
                Change::Place => {
                    next_id += 1;
                    let a = Assignment {
                        task: format!("task-{next_id}"),
                        fence: revision,
                        desired_status: DesiredStatus::Running,
                        reason: None,
                    };
                    etcd.insert(a.task.clone(), a.clone());
                    Some(Ok(a))
                }
                Change::Stop(i) => pick(*i).map(|t| {
                    let a = etcd.get_mut(&t).expect("present");
                    a.desired_status = DesiredStatus::Stopped;
                    a.reason = Some("Task stopped by user".into());
                    Ok(a.clone())
                }),
                Change::Delete(i) => pick(*i).map(|t| {
                    etcd.remove(&t);
                    Err(t)
                }),
                Change::Refence(i) => pick(*i).map(|t| {
                    let a = etcd.get_mut(&t).expect("present");
                    a.fence = revision;
                    Ok(a.clone())
                }),
            };
            if *seen {
                match event {
                    Some(Ok(a)) => node.put(&a).map_err(TestCaseError::fail)?,
                    Some(Err(t)) => node.delete(&t),
                    None => {}
                }
            }
            if *resync_after {
                node.resync(&etcd).map_err(TestCaseError::fail)?;
            }
            // Never accepted twice (ids are placed once), and what it remembers is in etcd or
            // was deleted there.
            for (t, n) in &node.accepted {
                prop_assert_eq!(*n, 1, "{} accepted {} times", t, n);
            }
        }
        node.resync(&etcd).map_err(TestCaseError::fail)?;
        prop_assert_eq!(
            node.memory.accepted.keys().collect::<Vec<_>>(),
            etcd.keys().collect::<Vec<_>>()
        );
        for (t, a) in &etcd {
            // Its first fence kept, whatever was written since.
            prop_assert_eq!(node.memory.accepted.get(t), node.fences.get(t));
            let same = node.fences.get(t) == Some(&a.fence);
            if a.desired_status == DesiredStatus::Stopped && same {
                prop_assert!(node.stopped.contains(t), "{} says STOPPED, never stopped", t);
            }
        }
        for (t, n) in &node.accepted {
            prop_assert_eq!(*n, 1, "{} accepted {} times", t, n);
        }
    }
}
