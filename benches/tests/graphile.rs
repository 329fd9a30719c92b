//! Section 8 at tiny sizes: the `graphile_worker` peer adds, runs and deletes every job once,
//! and one round of the comparison yields every row with both sides measured. Without a
//! PostgreSQL server they print a skip line and pass, unless `OUTBOX_PG_REQUIRED=1`.

mod support;

use outbox_benches::graphile::{compare, Graphile, Sizes};
use outbox_benches::pg::PgServer;
use support::{runtime, schema_exists};

#[test]
fn the_peer_runs_every_job_once_and_its_drain_counts_strictly() -> outbox_core::Result<()> {
    runtime().block_on(async {
        let Some(server) = PgServer::find().await? else {
            return Ok(());
        };
        let peer = Graphile::create(server.schema()).await?;
        peer.enqueue_one_by_one(2).await?;
        peer.enqueue_concurrently(3).await?;
        peer.fill(25).await?;
        assert_eq!(peer.jobs().await?, 30);
        let drained = peer.drain(30, 4).await?;
        assert_eq!(drained.records, 30);
        assert_eq!(peer.jobs().await?, 0);
        // One job more than the drain expects: it must say so, not report a rate.
        peer.fill(6).await?;
        assert!(peer.drain(5, 1).await.is_err());
        assert_eq!(peer.jobs().await?, 0);
        let name = peer.schema().name().to_owned();
        peer.schema().drop().await?;
        assert!(!schema_exists(&server, &name).await?);
        Ok(())
    })
}

#[test]
fn one_round_measures_every_row_on_both_sides() -> outbox_core::Result<()> {
    runtime().block_on(async {
        let Some(server) = PgServer::find().await? else {
            return Ok(());
        };
        let lines = compare(
            &server,
            Sizes {
                records: 40,
                rounds: 1,
            },
        )
        .await?;
        let rows = [
            "enqueue-one",
            "enqueue-64",
            "drain-c1",
            "drain-c4",
            "drain-c32",
            "runners-1",
            "runners-2",
            "runners-4",
            "scaling-4",
        ];
        assert_eq!(lines.len(), rows.len(), "{lines:#?}");
        for (line, row) in lines.iter().zip(rows) {
            assert!(line.starts_with(&format!("row={row}\t")), "{line}");
            let field = |key: &str| -> Option<f64> {
                line.split('\t')
                    .find_map(|f| f.strip_prefix(&format!("{key}=")))
                    .and_then(|v| v.parse().ok())
            };
            for key in ["ours_rate", "peer_rate", "ratio"] {
                let value = field(key).unwrap_or_else(|| panic!("no {key} in {line}"));
                assert!(value > 0.0 && value.is_finite(), "{line}");
            }
            assert_eq!(field("rounds"), Some(1.0), "{line}");
            if row.starts_with("drain") || row.starts_with("runners") {
                // Deleting 40 records writes WAL on every side.
                assert!(field("ours_wal").is_some_and(|w| w > 0.0), "{line}");
                assert!(field("peer_wal").is_some_and(|w| w > 0.0), "{line}");
            }
        }
        Ok(())
    })
}
