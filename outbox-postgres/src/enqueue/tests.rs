use super::*;

/// A driver that answers from a script and records what it was sent.
struct Scripted {
    sent: Vec<(String, usize, Shape)>,
    answers: Vec<Vec<Answer>>,
}

impl Execute for Scripted {
    async fn run(&mut self, batch: Vec<Stmt<'_>>) -> Result<Vec<Answer>> {
        for stmt in &batch {
            self.sent
                .push((stmt.sql.to_owned(), stmt.params.len(), stmt.shape));
        }
        Ok(self.answers.remove(0))
    }
}

#[test]
fn answers_out_of_shape_are_corruption_not_a_panic() {
    let mut answers = Answers(vec![Answer::Done].into_iter());
    assert!(matches!(
        answers.ids(),
        Err(outbox_core::Error::Corrupted { .. })
    ));
    assert!(answers.next().is_err(), "no answer left");
    assert!(allocated(vec![3, 1], 3).is_err());
    assert_eq!(allocated(vec![3, 1], 2).ok(), Some(vec![1, 3]));
}

#[test]
fn a_plain_batch_is_two_batches_of_statements_in_lock_order() {
    let sql = crate::sql::Sql::new("s");
    let mut driver = Scripted {
        sent: Vec::new(),
        answers: vec![
            vec![
                Answer::Done,
                Answer::Groups(vec!["g".into()]),
                Answer::Ids(vec![8, 7]),
            ],
            vec![Answer::Done, Answer::Done],
        ],
    };
    let core = Target {
        sql: &sql,
        channel: "s",
        group_seed: 1,
        coalesce_seed: 2,
        max_payload: 1024,
        cap: Cap::none(),
    };
    let batch = vec![
        NewRecord::new(b"a".to_vec()).in_group("g"),
        NewRecord::new(b"b".to_vec()),
    ];
    let enqueued = now(enqueue(&core, &mut driver, batch, 5)).expect("enqueue");
    assert_eq!(
        enqueued.ids,
        vec![outbox_core::RecordId(7), outbox_core::RecordId(8)]
    );
    let texts: Vec<&str> = driver.sent.iter().map(|(s, _, _)| s.as_str()).collect();
    assert_eq!(
        texts,
        vec![
            sql.lock_named_groups.as_str(),
            &sql.members,
            &sql.allocate_ids,
            &sql.insert,
            &sql.notify
        ]
    );
    assert_eq!(driver.sent[3].1, 12, "the insert's twelve parameters");
}
