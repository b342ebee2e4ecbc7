//! Which task to stop when the data directory's file system is full (the state store's reserve
//! was released to keep the store writable, see `berth_store::reserve`): the running task whose
//! scratch directory (`DATA_DIR/tasks/<id>`, where its volumes without a host path live) holds the
//! most, and the stop reason that says so. Pure: the agent measures the directories and sends the
//! stop.

const MIB: u64 = 1 << 20;

/// The task holding the most scratch bytes (ties: the first given), none when none holds any.
pub fn offender(sizes: Vec<(String, u64)>) -> Option<(String, u64)> {
    sizes
        .into_iter()
        .filter(|(_, b)| *b > 0)
        .fold(None, |best: Option<(String, u64)>, (id, b)| match best {
            Some((_, top)) if top >= b => best,
            _ => Some((id, b)),
        })
}

/// The stop reason of the task [`offender`] chose, holding `bytes`.
pub fn full_reason(bytes: u64) -> String {
    format!(
        "the data directory's file system is full; this task's scratch volume holds {} MiB",
        bytes.div_ceil(MIB)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_holding_the_most_is_chosen() {
        let sizes = vec![
            ("a".into(), 4 * MIB),
            ("b".into(), 40 * MIB),
            ("c".into(), 0),
        ];
        assert_eq!(offender(sizes), Some(("b".to_string(), 40 * MIB)));
        assert_eq!(offender(vec![("c".into(), 0)]), None);
        assert_eq!(
            offender(vec![("x".into(), MIB), ("y".into(), MIB)]),
            Some(("x".to_string(), MIB)),
            "a tie goes to the first"
        );
        assert_eq!(
            full_reason(40 * MIB),
            "the data directory's file system is full; this task's scratch volume holds 40 MiB"
        );
    }
}
